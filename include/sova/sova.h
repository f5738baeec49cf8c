/* sova — C API: a drop-in for the CUDA runtime's stream-ordered allocator.
 *
 * Every function mirrors its runtime namesake (cudaMallocAsync ->
 * sovaMallocAsync, cudaMemPool_t -> sovaMemPool_t, ...), takes the runtime's
 * own types and returns the cudaError_t the runtime returns in the same
 * situation (docs/runtime-errors.md lists them, measured on an H100).
 * No function throws or changes the runtime's last-error state.
 *
 * Thread safety: every function may be called from any thread at once.
 * Streams: 0 / cudaStreamLegacy is the legacy default stream and
 * cudaStreamPerThread the calling thread's own; code compiled with
 * `nvcc --default-stream per-thread` (CUDA_API_PER_THREAD_DEFAULT_STREAM)
 * gets 0 mapped to the per-thread stream, as the runtime does.
 * docs/c-api.md lists every function's codes and where sova differs.
 */
#ifndef SOVA_SOVA_H
#define SOVA_SOVA_H

#include <sova/export.h>

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sovaMemPool_st* sovaMemPool_t;

/** Placement policy of a pool. */
typedef enum sovaPolicy {
  sovaPolicyDefault = 0, /**< size classes up to 256 KiB, exact above; small blocks slab-placed, larger ones best fit */
  sovaPolicySizeClass = 1, /**< four size classes per power of two, slab-placed */
  sovaPolicyBuddy = 2,     /**< power-of-two blocks at buddy positions */
  sovaPolicyBestFit = 3    /**< exact sizes, best fit */
} sovaPolicy;
/* Each is described in include/sova/placement.hpp and compared in
 * docs/policies.md; a policy of one's own is C++ only (sova::PlacementPolicy). */

/** Flags of a pool (sovaMemPoolProps::flags). */
typedef enum sovaMemPoolFlags {
  /** No per-call stream checks: the pool no longer sees graph capture (an
   * allocation on a capturing stream is then served as an eager one, wrong
   * for a graph: docs/graphs.md, "Limits") nor tells a new stream from a
   * destroyed one whose handle it received (docs/design.md, "Stream checks");
   * an allocate+free pair then makes no driver call but a free's fence where
   * one is due (an event record: Pool::deallocate in include/sova/pool.hpp
   * says when). Only where no stream is
   * captured, and none destroyed while blocks it freed may still be in use. The default pools take it from
   * the environment: SOVA_STREAM_CHECKS=0. */
  sovaMemPoolNoStreamChecks = 0x1,
  /** No physical remapping: back new blocks with new physical memory only,
   * never by moving free physical chunks of the pool under them
   * (sova::PoolOptions::remap). For comparisons; remapping is on by default. */
  sovaMemPoolNoRemap = 0x2,
  /** Thorough remapping (sova::RemapEffort::thorough): more chunk moves and
   * chunks of 8-16 MiB, for reserved memory nearer the live peak where
   * free memory lies in pieces, at more time per allocation that misses the
   * stream's cache (docs/policies.md). With sovaMemPoolNoRemap:
   * cudaErrorInvalidValue. */
  sovaMemPoolThoroughRemap = 0x4,
  /** Request generic compression for the pool's memory (docs/vmm.md). A
   * device without it: cudaErrorNotSupported. sovaMemGetAllocationProperties
   * says whether a block got it. */
  sovaMemPoolCompressible = 0x8,
  /** A host memory pool: pinned host memory on NUMA node hostNumaNode,
   * readable and writable by the device and the host (docs/vmm.md). A
   * device without host-NUMA VMM: cudaErrorNotSupported. */
  sovaMemPoolHostMemory = 0x10,
  /** Pin ahead: a thread of the pool's own pins host memory for sleep's
   * backups in the background as the pool grows, up to
   * min(sleepHostBudget, the most a successful growth reserved: a growth
   * undone midway needs no backup), so that the first
   * sovaMemPoolSleep finds it pinned (sova::PoolOptions::sleep_pin_ahead;
   * docs/sleep-wake.md, "Pinning ahead"). Off by default. */
  sovaMemPoolSleepPinAhead = 0x20
} sovaMemPoolFlags;

/** Properties of a pool; zero-initialise, then set what you need. */
typedef struct sovaMemPoolProps {
  int device; /**< device ordinal */
  sovaPolicy policy;
  size_t maxSize; /**< most physical memory held; 0 or more than the device: the device's */
  enum cudaMemAllocationHandleType
      handleTypes;            /**< IPC: cudaMemHandleTypeNone or cudaMemHandleTypePosixFileDescriptor (docs/ipc.md) */
  unsigned int flags;         /**< sovaMemPoolFlags; unknown bits: cudaErrorInvalidValue */
  int hostNumaNode;           /**< with sovaMemPoolHostMemory: the host NUMA node; else must be 0 */
  unsigned char reservedPad[4]; /**< must be zero */
  /** Most pinned host memory kept for sleep's backups; 0 = no limit. A sleep
   * needing more is refused, nothing changed (sova::PoolOptions::sleep_host_budget). */
  size_t sleepHostBudget;
  unsigned char reserved[48]; /**< must be zero */
} sovaMemPoolProps;

/** cudaMallocAsync from the device's current pool (sovaDeviceGetMemPool of the
 * current device; its default pool is created on first use). size 0 gives
 * *devPtr = NULL and cudaSuccess. devPtr NULL: cudaErrorInvalidValue. Out of
 * memory: cudaErrorMemoryAllocation, the pool unchanged. On any failure
 * *devPtr is set to NULL. On a stream under graph capture, graph memory
 * (docs/graphs.md): held by the graph being captured until it, its
 * executables and their launches are gone; an invalidated capture:
 * cudaErrorStreamCaptureInvalidated. */
SOVA_API cudaError_t sovaMallocAsync(void** devPtr, size_t size, cudaStream_t stream);
/** cudaFreeAsync: the pool is found from the pointer. NULL: cudaSuccess.
 * A pointer no sova pool handed out, an interior pointer, or a double free:
 * cudaErrorInvalidValue, and nothing changes (the runtime accepts cudaMalloc
 * memory; sova cannot free it). The last block of a destroyed pool releases
 * the pool. */
SOVA_API cudaError_t sovaFreeAsync(void* devPtr, cudaStream_t stream);
/** As sovaMallocAsync, from `pool`. NULL, destroyed or otherwise invalid
 * pool: cudaErrorInvalidValue (handles are validated, never dereferenced). */
SOVA_API cudaError_t sovaMallocFromPoolAsync(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream);
/** Creates a pool. NULL or invalid props (bad device, non-zero reserved bytes,
 * unknown policy, unknown handle type bits, a negative hostNumaNode, or one
 * without sovaMemPoolHostMemory): cudaErrorInvalidValue; a handle type,
 * compression or host memory the device lacks, fabric handles (not built),
 * or a device without VMM: cudaErrorNotSupported.
 * Zeroed props are valid: device 0, default policy, no size limit. The first
 * pool created fixes the process driver (sova::set_process_driver). */
SOVA_API cudaError_t sovaMemPoolCreate(sovaMemPool_t* pool, const sovaMemPoolProps* props);
/** Destroys a pool. Like the runtime, returns at once; if blocks are still
 * live, the pool's memory is released when the last of them is freed (with
 * sovaFreeAsync). The handle is invalid at once, everywhere. If the pool was
 * a device's current pool, that device's default pool becomes current again.
 * A default pool, NULL or an invalid handle: cudaErrorInvalidValue. Safe
 * while other threads use the pool: they finish first or see an invalid handle. */
SOVA_API cudaError_t sovaMemPoolDestroy(sovaMemPool_t pool);
/** cudaMemPoolSet/GetAttribute: the runtime's attributes, rules and codes.
 * NULL or invalid pool, NULL value, unknown attribute, setting a read-only
 * figure, or a high-water mark to non-zero: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemPoolSetAttribute(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value);
SOVA_API cudaError_t sovaMemPoolGetAttribute(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value);
/** Releases now the pool's free physical memory beyond minBytesToKeep, never
 * memory under live blocks (may synchronize the device to prove frees
 * complete). NULL or invalid pool: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemPoolTrimTo(sovaMemPool_t pool, size_t minBytesToKeep);
/** Tells `pool` that all work submitted to `stream` before this call is
 * complete (the caller synchronized the stream, or saw an event recorded after
 * that work complete): the pool's frees on `stream` until now become reusable
 * by every stream at once, without an event or a wait, and releasable. This
 * is the dependency sova can follow; it cannot see the caller's own events
 * (cudaMemPoolReuseFollowEventDependencies, docs/design.md). Calling it while
 * such work still runs is a race, as freeing memory in use would be. NULL or
 * invalid pool: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemPoolStreamSynchronized(sovaMemPool_t pool, cudaStream_t stream);

/** What sleep does with the live blocks' contents (docs/sleep-wake.md). */
typedef enum sovaSleepMode {
  sovaSleepBackup = 0,  /**< copied to pinned host memory, restored by wake */
  sovaSleepDiscard = 1, /**< dropped: undefined after wake */
  /** dropped, and the blocks still live read zero after wake (one device
   * memset of their bytes on wake; cudaErrorNotSupported at sleep on a driver
   * without memsets) */
  sovaSleepDiscardZeroed = 2,
} sovaSleepMode;
/** Gives the pool's physical memory back to the device, its addresses kept:
 * after the work ordered before on `stream` (an event; no device
 * synchronize), live blocks are copied to pinned host memory (kept across
 * cycles) or discarded, then every chunk is unmapped and released. The pool
 * refuses allocations (cudaErrorNotPermitted) until sovaMemPoolWake; a free
 * while asleep is accepted and final. Asleep already: cudaSuccess. On
 * failure the pool is awake as it was or asleep (sovaMemPoolIsAsleep says
 * which), nothing leaked. The memory is the device's when it returns.
 * Checked first, nothing changed on failure (sovaGetLastErrorMessage says
 * which): NULL, invalid or imported pool, or a mode other than the three:
 * cudaErrorInvalidValue; a stream the driver does not know: the driver's
 * error (cudaErrorInvalidResourceHandle; a garbage pointer or a destroyed
 * stream's handle may crash the CUDA driver, as with the runtime); a pool
 * exported (sovaMemPoolExportToShareableHandle or sovaMemPoolExportPointer
 * called once: importers map its memory): cudaErrorNotPermitted. Backup on a driver without host copies,
 * or sovaSleepDiscardZeroed on one without memsets: cudaErrorNotSupported,
 * the pool awake as it was. A backup needing more pinned host memory than the
 * pool's sleepHostBudget: cudaErrorMemoryAllocation before anything is
 * copied or released, the pool awake (the message says so; counted in
 * sleepBudgetRefusals). Host memory for the backup refused part-way (the
 * host refusing the mapping, the driver the lock: the locked-memory limit,
 * ulimit -l, or the host's memory): cudaErrorMemoryAllocation (or the
 * driver's error) before anything is released, the pool awake as it was,
 * what the sleep pinned given back; the message says which limit.
 * Must not race with allocations from the pool. */
SOVA_API cudaError_t sovaMemPoolSleep(sovaMemPool_t pool, sovaSleepMode mode, cudaStream_t stream);
/** Makes the memory anew under the same addresses with the access granted
 * before, restores backed-up contents (sovaSleepDiscardZeroed: zeroes the
 * live blocks) on the pool's copy stream and makes `stream` wait for them: returns at once, before the restore is done (read
 * the contents on `stream`, or after synchronizing it:
 * sovaMemPoolWakeSynchronize). Awake already: cudaSuccess. Pool and stream
 * checked as for sovaMemPoolSleep, nothing changed on failure. On failure
 * (device full: cudaErrorMemoryAllocation) the pool stays asleep. */
SOVA_API cudaError_t sovaMemPoolWake(sovaMemPool_t pool, cudaStream_t stream);
/** sovaMemPoolWake, then waits on the host for `stream` (its work so far, the
 * restore included; cudaStreamSynchronize on sova's driver, the simulation's
 * under SOVA_DRIVER=sim): the contents are then visible to every stream and
 * to the host. For callers without a CUDA runtime of their own (Python's
 * sova.Pool.wake). Awake already: only the wait. A failed wake: its error,
 * no wait; a failed wait: its error, the pool awake. */
SOVA_API cudaError_t sovaMemPoolWakeSynchronize(sovaMemPool_t pool, cudaStream_t stream);
/** *asleep = 1 from the start of a sleep until its wake, else 0. */
SOVA_API cudaError_t sovaMemPoolIsAsleep(sovaMemPool_t pool, int* asleep);
/** Frees the pinned host memory kept for backups (pinned ahead too); asleep:
 * cudaErrorNotPermitted. Pin-ahead then holds until a growth leaves the pool
 * reserving more than it ever had (a growth undone midway included;
 * resetting reservedHigh does not lower that mark), or
 * sovaMemPoolReserveSleepBackup is called. */
SOVA_API cudaError_t sovaMemPoolReleaseSleepHostMemory(sovaMemPool_t pool);
/** Pins host memory for backups ahead, until the pool holds at least `bytes`
 * of it: a sleep backing up no more pins nothing (its reservedCurrent is
 * always enough). On failure the memory held is as before, and the message
 * says which limit refused (as for sovaMemPoolSleep); beyond the pool's
 * sleepHostBudget, whatever the size: cudaErrorMemoryAllocation, nothing
 * pinned, counted in sleepBudgetRefusals, the message the budget's; 64 TiB or
 * more without a budget: the same code, the message says so. */
SOVA_API cudaError_t sovaMemPoolReserveSleepBackup(sovaMemPool_t pool, size_t bytes);
/** Where the pool's last backup (sovaSleepBackup) holds the bytes at `ptr`:
 * *host is their host address and *bytes_there how many of the next `bytes`
 * lie there in one piece (a block's backup may be split between host slabs:
 * ask again past them). *host = NULL, *bytes_there = 0 where it holds none:
 * no backup yet, the last sleep discarded, no block live at that sleep there,
 * the host memory given back since (sovaMemPoolReleaseSleepHostMemory), or
 * `ptr` outside the pool. Kept across wake until the next sleep: after wake it
 * is what the sleep copied, not what the device holds now. The memory is the
 * pool's: read it only, and not past the next sleep or release. NULL `host` or
 * `bytes_there`, or a NULL, destroyed or imported pool: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemPoolGetSleepBackup(sovaMemPool_t pool, const void* ptr, size_t bytes, const void** host,
                                               size_t* bytes_there);
/** The device's default pool, created on first use (that device, default
 * properties; never destroyed). Device out of range: cudaErrorInvalidDevice;
 * pool NULL: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaDeviceGetDefaultMemPool(sovaMemPool_t* pool, int device);
/** Makes `pool` the device's current pool (what sovaMallocAsync uses there).
 * Device out of range, NULL or invalid pool, or a pool of another device:
 * cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaDeviceSetMemPool(int device, sovaMemPool_t pool);
/** The device's current pool: its default pool unless sovaDeviceSetMemPool
 * set another (and that one was not destroyed since). Device out of range or
 * pool NULL: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaDeviceGetMemPool(sovaMemPool_t* pool, int device);

/* Graph memory (docs/graphs.md): what sovaMallocAsync & co. gave to CUDA
 * graphs during stream capture. The device calls cover the device's default
 * and current pools; the pool calls, any pool. Attributes as the runtime's
 * (cudaGraphMemAttr*; value: a uint64_t): used and reserved are the same for
 * sova, the bytes graphs hold now, and their high-water marks; only a high
 * mark can be set, to 0, which resets it. Trim returns the memory of
 * released graphs to their pools, then releases free memory above each
 * pool's release threshold. Bad attribute or value: cudaErrorInvalidValue;
 * bad device: cudaErrorInvalidDevice; bad pool: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value);
SOVA_API cudaError_t sovaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value);
SOVA_API cudaError_t sovaDeviceGraphMemTrim(int device);
SOVA_API cudaError_t sovaMemPoolGetGraphMemAttribute(sovaMemPool_t pool, enum cudaGraphMemAttributeType attr,
                                                     void* value);
SOVA_API cudaError_t sovaMemPoolGraphMemTrim(sovaMemPool_t pool);

/* Share groups (docs/graphs.md, "Graphs that never run at once"): graphs the
 * program promises never run at once — no launch of one while a launch of
 * another may run, on any stream — share the memory their captures free, as
 * the runtime's graph memory nodes do for graphs launched on one stream and
 * PyTorch's torch.cuda.graph(pool=...) does. A group belongs to a pool; its id
 * (from 1) is never reused in that pool.
 * Create: *group gets a new group's id.
 * CaptureNext: the next capture whose first allocation from the pool is on
 * `stream` joins `group` (0: none, cancelling an earlier call for `stream`);
 * one capture per call. Pass the stream's handle: 0 is the legacy stream,
 * which cannot capture.
 * Destroy: no capture joins the group any more; its memory goes back to the
 * pool once its last member graph is released.
 * Bad pool, group, pointer or stream: cudaErrorInvalidValue, nothing changed. */
SOVA_API cudaError_t sovaMemPoolShareGroupCreate(sovaMemPool_t pool, uint64_t* group);
SOVA_API cudaError_t sovaMemPoolShareGroupCaptureNext(sovaMemPool_t pool, uint64_t group, cudaStream_t stream);
SOVA_API cudaError_t sovaMemPoolShareGroupDestroy(sovaMemPool_t pool, uint64_t group);

/** What one graph holds of a pool (sovaMemPoolGetGraphHoldings). */
typedef struct sovaGraphHolding {
  unsigned long long captureId; /**< the capture's id (cudaStreamGetCaptureInfo's), unique in the process */
  uint64_t heldBytes;           /**< bytes the graph holds: what it allocated, and blocks of other
                                     graphs whose free it captured */
  uint64_t heldBlocks;          /**< those blocks */
  uint64_t outputBytes;         /**< of those, allocated in the graph and not freed in it (its outputs) */
  uint64_t outputBlocks;        /**< those blocks */
  int capturing;                /**< 1: the capture may still be in progress */
  unsigned char reserved[20];   /**< zero */
} sovaGraphHolding;
/** Which graph holds what of the pool's graph memory: one entry per graph
 * whose memory is not yet back in the pool (released graphs are collected
 * first), in order of capture id. Writes min(count, capacity) entries to
 * `holdings` and the number of graphs to *count: call with capacity 0 (and
 * holdings NULL) to size the array, then again; the graphs may change
 * between the calls. NULL count, NULL holdings with capacity > 0, or a bad
 * pool: cudaErrorInvalidValue, nothing written. docs/graphs.md, "Which graph
 * holds what". */
SOVA_API cudaError_t sovaMemPoolGetGraphHoldings(sovaMemPool_t pool, sovaGraphHolding* holdings, size_t capacity,
                                                 size_t* count);
/** cudaMemPoolSetAccess / GetAccess: the runtime's codes (a device out of
 * range, or revoking the pool's own device: cudaErrorInvalidDevice; descs
 * NULL with count 0: cudaSuccess). NULL or invalid pool, NULL flags or
 * location: cudaErrorInvalidValue.
 * The runtime declares both structs without a typedef in C: spelled with
 * `struct` so that the header compiles as C and C++ alike. */
SOVA_API cudaError_t sovaMemPoolSetAccess(sovaMemPool_t pool, const struct cudaMemAccessDesc* descs, size_t count);
SOVA_API cudaError_t sovaMemPoolGetAccess(enum cudaMemAccessFlags* flags, sovaMemPool_t pool,
                                          struct cudaMemLocation* location);

/** A pool's statistics (sovaMemPoolGetStats): the four cudaMemPoolAttr
 * figures with the driver's meanings, then sova's own counters, each as
 * described at sova::PoolStats in include/sova/stats.hpp.
 * Extensible: zero-initialise, set structSize = sizeof(sovaMemPoolStats),
 * then call. The library writes only the fields that lie wholly inside
 * structSize and that it knows; a caller built against an older header (a
 * smaller struct) gets the fields it knows, one built against a newer header
 * keeps its zeros in fields this library lacks. New fields are only ever
 * appended. */
typedef struct sovaMemPoolStats {
  size_t structSize;           /**< set by the caller: sizeof(sovaMemPoolStats) */
  uint64_t reservedCurrent;    /**< cudaMemPoolAttrReservedMemCurrent */
  uint64_t reservedHigh;       /**< cudaMemPoolAttrReservedMemHigh */
  uint64_t usedCurrent;        /**< cudaMemPoolAttrUsedMemCurrent */
  uint64_t usedHigh;           /**< cudaMemPoolAttrUsedMemHigh */
  uint64_t liveBlocks;         /**< blocks handed out and not freed */
  uint64_t allocations;        /**< successful allocations, ever */
  uint64_t deallocations;      /**< successful frees, ever */
  uint64_t fastPathHits;       /**< allocations served from the stream's own cache */
  uint64_t failedAllocations;  /**< allocations refused (out of memory), ever */
  uint64_t cachedBytes;        /**< bytes in per-stream caches and the free heap, backed or not */
  uint64_t cachedSmallBytes;   /**< part of cachedBytes in small blocks */
  uint64_t freeBackedBytes;    /**< physical memory under free blocks, in whole granules (a granule a free block shares with a live one counts whole), at most reservedCurrent */
  uint64_t largestFreeBlock;   /**< largest free block wholly backed */
  uint64_t chunksMapped;       /**< physical chunks created and mapped, ever */
  uint64_t chunksUnmapped;     /**< physical chunks unmapped and released, ever */
  uint64_t chunksRemapped;     /**< free physical chunks moved under new VA, ever */
  uint64_t bytesRemapped;      /**< their bytes */
  uint64_t crossStreamReuses;  /**< blocks taken from another stream's frees */
  uint64_t crossStreamWaits;   /**< stream waits inserted (internal dependencies) */
  uint64_t eventsRecorded;     /**< events recorded to close stream epochs */
  uint64_t deviceSynchronizes; /**< last-resort device syncs before reporting out of memory */
  uint64_t remapWaits;         /**< host waits remapping made (a stream's frees; a moved chunk's old place) */
  /* Allocations the fast path did not serve, by the slow path's step that
   * served them, and the sampled host time of each step in ns
   * (sova::PoolStats::slow_*). */
  uint64_t slowFromHeap;
  uint64_t slowFromHeapAll;
  uint64_t slowFromOtherStreams;
  uint64_t slowWithWait;
  uint64_t slowGrown;
  uint64_t slowAfterSynchronize;
  uint64_t slowFromHeapNs;
  uint64_t slowFromHeapAllNs;
  uint64_t slowFromOtherStreamsNs;
  uint64_t slowWithWaitNs;
  uint64_t slowGrownNs;
  uint64_t slowAfterSynchronizeNs;
  uint64_t remapsToGhosts; /**< part of chunksRemapped: moves back to a ghost mapping (no driver call) */
  uint64_t ghostMappings;  /**< chunks' old mappings kept now */
  uint64_t streamStates;   /**< stream states held, retired ones included */
  uint64_t retiredStreams; /**< of them, destroyed streams whose handles were reused */
  uint64_t activeStreams;  /**< streams that allocated or freed in the last ~200 ms (as last counted) */
  uint64_t strandedBytes;  /**< cached by retired or inactive streams, until their frees are known complete */
  uint64_t asleepBytes;    /**< physical memory sleep gave back that wake has not made again */
  uint64_t sleepHostBytes; /**< pinned host memory kept for sleep's backups */
  /* CUDA graphs (docs/graphs.md): what captured graphs hold now, pool memory
   * also counted in reservedCurrent and usedCurrent. */
  uint64_t graphHeldBytes;  /**< bytes of the blocks graphs hold */
  uint64_t graphHeldBlocks; /**< those blocks */
  uint64_t graphs;          /**< graphs whose memory is not yet back in the pool */
  /* Sleep's host memory (docs/sleep-wake.md, "Pinning ahead";
   * sova::PoolStats::sleep_host_budget and after). */
  uint64_t sleepHostBudget;       /**< sovaMemPoolProps::sleepHostBudget (0: no limit) */
  uint64_t sleepPinAheadTarget;   /**< what pin-ahead works towards now (0: off, or held) */
  uint64_t sleepPinAheadBytes;    /**< the part of sleepHostBytes pinned ahead in the background */
  uint64_t sleepPinAheadFailures; /**< background pins that failed (not errors: the sleep pins the rest) */
  uint64_t sleepBudgetRefusals;   /**< sleeps and reservations refused: beyond sleepHostBudget */
} sovaMemPoolStats;

/** Fills *stats with `pool`'s statistics (see sovaMemPoolStats for the size
 * rule). NULL or invalid pool, NULL stats, or a structSize too small to hold
 * reservedCurrent: cudaErrorInvalidValue, and *stats is left unchanged. Takes
 * the pool's locks briefly; safe while other threads use the pool. */
SOVA_API cudaError_t sovaMemPoolGetStats(sovaMemPool_t pool, sovaMemPoolStats* stats);

/* ---- What a device supports of the VMM API, and what sova uses (docs/vmm.md) ---- */

/** sovaDeviceGetVmmSupport's answer. Device fields are the driver's
 * attributes (cuDeviceGetAttribute, cuMemGetAllocationGranularity); sova*
 * fields say what sova pools on the device will do. Booleans are 0 or 1. */
typedef struct sovaVmmSupport {
  char name[256];                /**< the device's name */
  size_t totalMemory;            /**< bytes of device memory */
  int vmm;                       /**< VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
  int posixFd;                   /**< HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */
  int fabric;                    /**< HANDLE_TYPE_FABRIC_SUPPORTED */
  int compression;               /**< GENERIC_COMPRESSION_SUPPORTED */
  int multicast;                 /**< MULTICAST_SUPPORTED (NVLink SHARP) */
  int rdmaWithVmm;               /**< GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED */
  int hostNumaVmm;               /**< HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
  int hostNumaId;                /**< HOST_NUMA_ID: nearest host node, -1 none */
  size_t granularityMinimum;     /**< CU_MEM_ALLOC_GRANULARITY_MINIMUM */
  size_t granularityRecommended; /**< CU_MEM_ALLOC_GRANULARITY_RECOMMENDED */
  int sovaPools;                 /**< sova can make pools here (needs vmm) */
  unsigned int sovaHandleTypes;  /**< handleTypes sovaMemPoolCreate accepts (bits of cudaMemAllocationHandleType) */
  int sovaCompression;           /**< sovaMemPoolCompressible is accepted */
  int sovaHostPools;             /**< host memory pools (sovaMemPoolProps::hostNumaNode) are accepted */
  int sovaMulticast;             /**< always 0: multicast is designed, not built (docs/vmm.md) */
  int sovaRdma;                  /**< chunks are created GPUDirect-RDMA capable */
  size_t sovaChunkBytes;         /**< largest physical chunk a default pool creates */
  unsigned char reserved[64];
} sovaVmmSupport;

/** Fills *support for `device` without creating a context or a pool.
 * support NULL: cudaErrorInvalidValue; device out of range:
 * cudaErrorInvalidDevice; no driver or GPU: the runtime's error
 * (cudaErrorNoDevice, cudaErrorInsufficientDriver). */
SOVA_API cudaError_t sovaDeviceGetVmmSupport(sovaVmmSupport* support, int device);

/** What the driver reports for the physical memory under a live block of a
 * sova pool (cuMemGetAllocationPropertiesFromHandle): where it lives, which
 * handle types it can be exported as, whether it is compressed. */
typedef struct sovaAllocationProperties {
  struct cudaMemLocation location; /**< cudaMemLocationTypeDevice or ...HostNuma, and its id */
  unsigned int handleTypes;        /**< bits of cudaMemAllocationHandleType */
  int compressed;                  /**< 1: generic compression granted */
  unsigned char reserved[32];
} sovaAllocationProperties;
/** props or ptr NULL, or ptr not the start of a live block of a sova pool:
 * cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemGetAllocationProperties(sovaAllocationProperties* props, const void* ptr);

/* ---- Growable allocations: realloc without a copy (sova/growable.hpp, docs/vmm.md) ---- */

typedef struct sovaGrowable_st* sovaGrowable_t;
/** Reserves maxSize bytes of VA on `device` and returns its address in
 * *devPtr, which never changes; no physical memory until the first resize.
 * NULL arguments or maxSize 0: cudaErrorInvalidValue; a bad device:
 * cudaErrorInvalidDevice; no VMM: cudaErrorNotSupported. */
SOVA_API cudaError_t sovaGrowableCreate(sovaGrowable_t* buffer, void** devPtr, size_t maxSize, int device);
/** Makes the first `size` bytes usable: growing maps physical memory after
 * what is mapped, without a copy; shrinking synchronizes `stream` and
 * releases the physical memory wholly beyond `size`. size > maxSize, NULL or
 * invalid buffer: cudaErrorInvalidValue; out of memory:
 * cudaErrorMemoryAllocation. Any failure changes nothing. */
SOVA_API cudaError_t sovaGrowableResize(sovaGrowable_t buffer, size_t size, cudaStream_t stream);
/** The size of the last resize and the physical memory mapped now (either
 * pointer may be NULL). Invalid buffer: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaGrowableGetInfo(sovaGrowable_t buffer, size_t* size, size_t* physicalBytes);
/** Synchronizes the device and releases everything. Invalid buffer:
 * cudaErrorInvalidValue. Handles are never reused: a destroyed buffer's
 * handle stays invalid. */
SOVA_API cudaError_t sovaGrowableDestroy(sovaGrowable_t buffer);

/* ---- Aliases: a second address for a block (sova/alias.hpp, docs/vmm.md) ---- */

/** Maps the physical memory of the live block starting at ptr (of a sova
 * pool) again, at a new address returned in *alias, with `flags`
 * (cudaMemAccessFlagsProtRead or ...ProtReadWrite) for the pool's device.
 * Coherence: work ordered after other work sees its writes through either
 * address; within one kernel, a write through one address and a read through
 * the other need fence.proxy.alias. Destroy the alias before freeing the
 * block. Anything but a live block's start, or other flags:
 * cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemAliasCreate(void** alias, void* ptr, enum cudaMemAccessFlags flags);
/** Synchronizes the block's device and unmaps the alias. An address that is
 * no live alias: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemAliasDestroy(void* alias);

/* ---- IPC: sharing a pool with other processes (docs/ipc.md) ---- */

/** cudaMemPoolExportToShareableHandle: writes a new POSIX file descriptor
 * (an int) to *shareableHandle for one importing process; send it over a
 * Unix socket (SCM_RIGHTS) and close it. The pool must have been created
 * with handleTypes cudaMemHandleTypePosixFileDescriptor. NULL arguments,
 * flags != 0, a pool without that handle type, another handle type:
 * cudaErrorInvalidValue; cudaMemHandleTypeFabric: cudaErrorNotSupported. */
SOVA_API cudaError_t sovaMemPoolExportToShareableHandle(void* shareableHandle, sovaMemPool_t pool,
                                                        enum cudaMemAllocationHandleType handleType,
                                                        unsigned int flags);
/** cudaMemPoolImportFromShareableHandle: shareableHandle is the descriptor
 * cast to a pointer, as with the runtime; it stays the caller's. The pool
 * returned serves sovaMemPoolImportPointer, sovaFreeAsync of the pointers
 * imported, sovaMemPoolSetAccess/GetAccess (read-only or read-write for its
 * device) and sovaMemPoolDestroy; it cannot allocate. A closed descriptor,
 * one that is not a sova pool handle, an exporter gone, or the exporting
 * process itself: cudaErrorInvalidValue. */
SOVA_API cudaError_t sovaMemPoolImportFromShareableHandle(sovaMemPool_t* pool, void* shareableHandle,
                                                          enum cudaMemAllocationHandleType handleType,
                                                          unsigned int flags);
/** cudaMemPoolExportPointer: export data for the live block starting at
 * ptr, of a pool created with a shareable handle type. Anything else:
 * cudaErrorInvalidValue. Freeing the block makes the data stale. */
SOVA_API cudaError_t sovaMemPoolExportPointer(struct cudaMemPoolPtrExportData* exportData, void* ptr);
/** cudaMemPoolImportPointer: maps the exported block here. Free it with
 * sovaFreeAsync (which synchronizes the stream given) before the exporter
 * frees it. Malformed, stale or another pool's data, an exporter gone:
 * cudaErrorInvalidValue, nothing changed. */
SOVA_API cudaError_t sovaMemPoolImportPointer(void** ptr, sovaMemPool_t pool,
                                              struct cudaMemPoolPtrExportData* exportData);

/* Per-thread default stream variants: stream 0 means cudaStreamPerThread. */
SOVA_API cudaError_t sovaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
SOVA_API cudaError_t sovaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
SOVA_API cudaError_t sovaMallocFromPoolAsync_ptsz(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream);
SOVA_API cudaError_t sovaMemPoolStreamSynchronized_ptsz(sovaMemPool_t pool, cudaStream_t stream);

/* The allocation log (docs/c-api.md, "The allocation log"): every allocation
 * and free of every sova pool in the process (C API, sova::Pool, the
 * LD_PRELOAD library), written as RMM's logging_resource_adaptor writes its
 * CSV (Thread,Time,Action,Pointer,Size,Stream) plus a Reserved column: the
 * physical memory sova's pools held, sampled every 10 ms. Records are
 * buffered per thread and written in time order by a background thread
 * (when a thread has 4096 buffered, and at least every 100 ms; by the thread
 * itself when the writer falls far behind), and at sovaLogStop or process
 * exit. SOVA_LOG=<file> in the environment starts it when the C API
 * creates its first pool (a default pool on first use, or sovaMemPoolCreate). */

/** Starts logging to `path` (created or truncated). NULL or empty path, a log
 * already running, or a file that cannot be opened for writing:
 * cudaErrorInvalidValue, and nothing changes. */
SOVA_API cudaError_t sovaLogStart(const char* path);
/** Writes what is buffered, closes the file and stops logging; later calls
 * log nothing. No log running: cudaSuccess, nothing done. A write error seen
 * while logging (disk full): cudaErrorUnknown, after closing. */
SOVA_API cudaError_t sovaLogStop(void);

/** What went wrong in the last sova call that failed on the calling thread,
 * as the runtime's cudaGetErrorString tells what a code means: the function,
 * then the reason where sova knows it ("sovaFreeAsync: cannot free 0x...:
 * already freed", "... inside a block allocated at 0x... (N bytes); free its
 * start", "... no NVIDIA driver or GPU was found ...; SOVA_DRIVER=sim runs
 * sova on its host simulation"), else the code's name and description. ""
 * when no sova call has failed on this thread. A successful call leaves it
 * as it was. The string belongs to the thread and is overwritten by its next
 * failure; never NULL. */
SOVA_API const char* sovaGetLastErrorMessage(void);

#ifdef __cplusplus
} /* extern "C" */

/* C++: typed-pointer overloads, as cuda_runtime.h has for the runtime's
 * calls, so that `float* f; sovaMallocAsync(&f, bytes, stream);` compiles
 * where `cudaMallocAsync(&f, ...)` does. Each forwards to the C function of
 * the same name (void** arguments still pick the C function: a template never
 * beats an exact non-template match; a literal NULL/nullptr does too, and
 * gets cudaErrorInvalidValue). Defined before the per-thread macros below,
 * so that under CUDA_API_PER_THREAD_DEFAULT_STREAM a call spelled
 * sovaMallocAsync reaches the _ptsz overloads and the plain ones keep calling
 * the plain C functions. Inline and header-only: nothing is exported. */
template <class T>
inline cudaError_t sovaMallocAsync(T** devPtr, size_t size, cudaStream_t stream) {
  return ::sovaMallocAsync(static_cast<void**>(static_cast<void*>(devPtr)), size, stream);
}
template <class T>
inline cudaError_t sovaMallocAsync_ptsz(T** devPtr, size_t size, cudaStream_t stream) {
  return ::sovaMallocAsync_ptsz(static_cast<void**>(static_cast<void*>(devPtr)), size, stream);
}
template <class T>
inline cudaError_t sovaMallocFromPoolAsync(T** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync(static_cast<void**>(static_cast<void*>(devPtr)), size, pool, stream);
}
template <class T>
inline cudaError_t sovaMallocFromPoolAsync_ptsz(T** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync_ptsz(static_cast<void**>(static_cast<void*>(devPtr)), size, pool, stream);
}
/* The runtime's four-argument cudaMallocAsync(ptr, size, pool, stream):
 * sovaMallocFromPoolAsync under the same name. */
inline cudaError_t sovaMallocAsync(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync(devPtr, size, pool, stream);
}
template <class T>
inline cudaError_t sovaMallocAsync(T** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync(static_cast<void**>(static_cast<void*>(devPtr)), size, pool, stream);
}
inline cudaError_t sovaMallocAsync_ptsz(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync_ptsz(devPtr, size, pool, stream);
}
template <class T>
inline cudaError_t sovaMallocAsync_ptsz(T** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  return ::sovaMallocFromPoolAsync_ptsz(static_cast<void**>(static_cast<void*>(devPtr)), size, pool, stream);
}
#endif /* __cplusplus */

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) && !defined(SOVA_BUILDING_LIBRARY)
#define sovaMallocAsync sovaMallocAsync_ptsz
#define sovaFreeAsync sovaFreeAsync_ptsz
#define sovaMallocFromPoolAsync sovaMallocFromPoolAsync_ptsz
#define sovaMemPoolStreamSynchronized sovaMemPoolStreamSynchronized_ptsz
#endif

#endif /* SOVA_SOVA_H */
