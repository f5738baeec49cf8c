/* sova — C API: a drop-in for the CUDA runtime's stream-ordered allocator.
 *
 * Every function mirrors its runtime namesake (cudaMallocAsync ->
 * sovaMallocAsync, cudaMemPool_t -> sovaMemPool_t, ...), takes the runtime's
 * own types and returns the cudaError_t the runtime returns in the same
 * situation (docs/notes/runtime-errors.md lists them, measured on an H100).
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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sovaMemPool_st* sovaMemPool_t;

/** Placement policy of a pool. */
typedef enum sovaPolicy {
  sovaPolicyDefault = 0,   /**< exact sizes; small blocks slab-placed, larger ones best fit */
  sovaPolicySizeClass = 1, /**< four size classes per power of two, slab-placed */
  sovaPolicyBuddy = 2,     /**< power-of-two blocks at buddy positions */
  sovaPolicyBestFit = 3    /**< exact sizes, best fit */
} sovaPolicy;
/* Each is described in include/sova/placement.hpp and compared in
 * docs/policies.md; a policy of one's own is C++ only (sova::PlacementPolicy). */

/** Flags of a pool (sovaMemPoolProps::flags). */
typedef enum sovaMemPoolFlags {
  /** No per-call stream checks: the pool no longer refuses streams under
   * graph capture nor tells a new stream from a destroyed one whose handle it
   * received (docs/design.md, "Stream checks"); an allocate+free pair then
   * makes no driver call. Only where no stream is captured, and none destroyed
   * while blocks it freed may still be in use. The default pools take it from
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
  sovaMemPoolThoroughRemap = 0x4
} sovaMemPoolFlags;

/** Properties of a pool; zero-initialise, then set what you need. */
typedef struct sovaMemPoolProps {
  int device;                                   /**< device ordinal */
  sovaPolicy policy;
  size_t maxSize;                               /**< most physical memory held; 0 or more than the device: the device's */
  enum cudaMemAllocationHandleType handleTypes; /**< IPC: only cudaMemHandleTypeNone for now */
  unsigned int flags;                           /**< sovaMemPoolFlags; unknown bits: cudaErrorInvalidValue */
  unsigned char reserved[60];                   /**< must be zero */
} sovaMemPoolProps;

/** cudaMallocAsync from the device's current pool (sovaDeviceGetMemPool of the
 * current device; its default pool is created on first use). size 0 gives
 * *devPtr = NULL and cudaSuccess. devPtr NULL: cudaErrorInvalidValue. Out of
 * memory: cudaErrorMemoryAllocation, the pool unchanged. On any failure
 * *devPtr is set to NULL. A stream under graph capture:
 * cudaErrorStreamCaptureUnsupported. */
SOVA_API cudaError_t sovaMallocAsync(void** devPtr, size_t size, cudaStream_t stream);
/** cudaFreeAsync: the pool is found from the pointer. NULL: cudaSuccess.
 * A pointer no sova pool handed out, an interior pointer, or a double free:
 * cudaErrorInvalidValue, and nothing changes (the runtime accepts cudaMalloc
 * memory; sova cannot free it). The last block of a destroyed pool releases
 * the pool. */
SOVA_API cudaError_t sovaFreeAsync(void* devPtr, cudaStream_t stream);
/** As sovaMallocAsync, from `pool`. NULL, destroyed or otherwise invalid
 * pool: cudaErrorInvalidValue (handles are validated, never dereferenced). */
SOVA_API cudaError_t sovaMallocFromPoolAsync(void** devPtr, size_t size, sovaMemPool_t pool,
                                             cudaStream_t stream);
/** Creates a pool. NULL or invalid props (bad device, non-zero reserved bytes,
 * unknown policy): cudaErrorInvalidValue; a policy or handle type not yet
 * available: cudaErrorNotSupported; a device without VMM: cudaErrorNotSupported.
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
/** cudaMemPoolSetAccess / GetAccess: the runtime's codes (a device out of
 * range, or revoking the pool's own device: cudaErrorInvalidDevice; descs
 * NULL with count 0: cudaSuccess). NULL or invalid pool, NULL flags or
 * location: cudaErrorInvalidValue.
 * The runtime declares both structs without a typedef in C: spelled with
 * `struct` so that the header compiles as C and C++ alike. */
SOVA_API cudaError_t sovaMemPoolSetAccess(sovaMemPool_t pool, const struct cudaMemAccessDesc* descs,
                                          size_t count);
SOVA_API cudaError_t sovaMemPoolGetAccess(enum cudaMemAccessFlags* flags, sovaMemPool_t pool,
                                          struct cudaMemLocation* location);

/* Per-thread default stream variants: stream 0 means cudaStreamPerThread. */
SOVA_API cudaError_t sovaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
SOVA_API cudaError_t sovaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
SOVA_API cudaError_t sovaMallocFromPoolAsync_ptsz(void** devPtr, size_t size, sovaMemPool_t pool,
                                                  cudaStream_t stream);
SOVA_API cudaError_t sovaMemPoolStreamSynchronized_ptsz(sovaMemPool_t pool, cudaStream_t stream);

#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) && !defined(SOVA_BUILDING_LIBRARY)
#define sovaMallocAsync sovaMallocAsync_ptsz
#define sovaFreeAsync sovaFreeAsync_ptsz
#define sovaMallocFromPoolAsync sovaMallocFromPoolAsync_ptsz
#define sovaMemPoolStreamSynchronized sovaMemPoolStreamSynchronized_ptsz
#endif

#ifdef __cplusplus
}
#endif

#endif /* SOVA_SOVA_H */
