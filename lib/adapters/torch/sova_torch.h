/* sova — the PyTorch adapter's C interface (libsova_torch.so, installed in the
 * Python package beside libsova.so; python/sova/torch.py drives it).
 *
 * sova_torch_malloc / sova_torch_free have the signatures that
 * torch.cuda.memory.CUDAPluggableAllocator calls: PyTorch passes their
 * addresses to torch._C._cuda_customAllocator. They serve each device from
 * its own sova pool, created on first use with the options of
 * sova_torch_configure, and made that device's current C API pool
 * (sovaDeviceSetMemPool), so other libraries on sova's C API share it.
 *
 * Why a separate library rather than more of libsova: PyTorch-specific
 * behaviour (throwing through PyTorch's C++ frames, its record_stream rule,
 * its memory-snapshot history) stays out of the allocator, which other
 * adapters use as it is. It links libsova and uses only its public API.
 *
 * Errors: functions returning int return a cudaError_t value (0 = success),
 * and set a message for sova_torch_last_error() on failure; nothing changes
 * on failure. sova_torch_malloc throws (a C++ exception, which PyTorch turns
 * into a Python exception): PyTorch's pluggable allocator does not check for
 * NULL. */
#ifndef SOVA_TORCH_H
#define SOVA_TORCH_H

#include <sova/sova.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Options of the pools sova_torch creates (one per device). */
typedef struct sovaTorchOptions {
  uint64_t releaseThreshold; /**< cudaMemPoolAttrReleaseThreshold; UINT64_MAX keeps all */
  int policy;                /**< sovaPolicy */
  unsigned int flags;        /**< sovaMemPoolFlags (stream checks, remapping; sovaMemPoolSleepPinAhead: tags' pools only) */
  size_t maxSize;            /**< sovaMemPoolProps::maxSize; 0 = the device's memory */
  size_t sleepHostBudget;    /**< sovaMemPoolProps::sleepHostBudget; 0 = no limit */
} sovaTorchOptions;

/** Sets the options of pools not yet created. Unknown policy or flag bits, or
 * contradictory remap flags: cudaErrorInvalidValue. Once any pool exists:
 * cudaErrorInvalidValue (the pools already made keep their options). */
SOVA_API int sova_torch_configure(const sovaTorchOptions* options);

/** CUDAPluggableAllocator's alloc: `size` bytes for work on `stream` of
 * `device`. size 0 gives NULL. Throws on failure: on running out of memory
 * the exception is PyTorch's c10::OutOfMemoryError when sova_torch_bind_torch
 * succeeded (torch.OutOfMemoryError in Python), else a std::bad_alloc; its
 * message names the request, the pool's reserved and live bytes and largest
 * free block. A stream under graph capture, or a bad device: std::runtime_error. */
SOVA_API void* sova_torch_malloc(size_t size, int device, cudaStream_t stream);
/** As sova_torch_malloc, returning NULL on failure instead of throwing (for
 * torch.cuda.MemPool, whose caching allocator treats NULL as out of memory
 * and raises its own error); the reason is left for sova_torch_last_error(). */
SOVA_API void* sova_torch_malloc_nothrow(size_t size, int device, cudaStream_t stream);
/** As sova_torch_malloc_nothrow, returning the cudaError_t (0 = success;
 * cudaErrorMemoryAllocation when out of memory) with the pointer in *ptr
 * (NULL on failure): for callers that raise their own exception per error,
 * such as sova's native PyTorch backend (python/sova/_torch_native). */
SOVA_API int sova_torch_try_malloc(void** ptr, size_t size, int device, cudaStream_t stream);
/** CUDAPluggableAllocator's free. PyTorch passes the allocation's own stream.
 * Streams recorded for `ptr` (sova_torch_record_stream) are made to finish
 * their work first: the free's stream waits for an event recorded on each.
 * Never throws: a free refused because its stream is under graph capture is
 * deferred until it is not; any other refusal is counted (freeErrors) and
 * reported once on stderr. */
SOVA_API void sova_torch_free(void* ptr, size_t size, int device, cudaStream_t stream);

/** The alloc function of sova.torch.mem_pool()'s allocator and of the pools
 * sova's native PyTorch backend creates: PyTorch's caching allocator asks it
 * for segments it keeps as long as it likes, also while `stream` is being
 * captured into a CUDA graph (after switching the thread to relaxed capture
 * mode). Such a segment is not graph memory: when `stream` is captured it is
 * allocated on a stream of the adapter's own, which is then synchronized, so
 * the memory is ready for every stream and nothing is enqueued on the
 * captured one. Otherwise as sova_torch_malloc_nothrow, but never checked
 * against the memory limit (PyTorch checks its pools' growth). NULL on failure
 * (PyTorch raises its out-of-memory error; sova_torch_last_error() says why). */
SOVA_API void* sova_torch_malloc_segment(size_t size, int device, cudaStream_t stream);
/** The free function that goes with sova_torch_malloc_segment. PyTorch's
 * caching allocator returns a segment once its blocks are free, but their last
 * use may be a graph replayed on another stream than the segment's: as
 * cudaFree does for PyTorch's own segments, the device is synchronized first
 * (where that fails, as during another thread's capture, the segment's stream
 * is), then the segment is freed as by sova_torch_free. Never throws. */
SOVA_API void sova_torch_free_segment(void* ptr, size_t size, int device, cudaStream_t stream);

/** The segment source of the private pools sova's native PyTorch backend
 * creates (graph captures, torch.cuda.MemPool): as sova_torch_malloc_segment,
 * but an untagged thread's segments come from the device's segment pool
 * (sova_torch_segment_pool), not from the device's pool, so that the device
 * pool's figures are PyTorch's ordinary allocations alone and the backend
 * counts the private pools as PyTorch's allocator does (their segments'
 * sizes). A thread under a tag gets its tag's pool, as sova_torch_malloc_segment
 * does (the segments sleep with the tag). Not counted in sova_torch_get_stats
 * nor checked against the memory limit: PyTorch's allocator checks its pools'
 * growth against its own limit before it asks. NULL on failure. */
SOVA_API void* sova_torch_malloc_pool_segment(size_t size, int device, cudaStream_t stream);
/** The free function that goes with sova_torch_malloc_pool_segment: the
 * device is synchronized first, as for sova_torch_free_segment, then the
 * segment is freed and the segment pool gives its free physical memory back
 * (so what it holds is its live segments). Never throws. */
SOVA_API void sova_torch_free_pool_segment(void* ptr, size_t size, int device, cudaStream_t stream);
/** The device's segment pool (sova_torch_malloc_pool_segment), or NULL when
 * none was created yet. */
SOVA_API sovaMemPool_t sova_torch_segment_pool(int device);

/** torch.cuda.set_per_process_memory_fraction for sova: from now on an
 * allocation through sova_torch_malloc, _nothrow or _try_malloc on `device`
 * that would leave more than `fraction` of the device's memory (its total, as
 * cudaMemGetInfo says) reserved fails as out of memory, as PyTorch's
 * allocator's does: reserved here is the memory of the adapter's pools on the
 * device (its pool and its tags' pools) plus what the external-reserved
 * function reports (sova_torch_set_external_reserved_fn). An allocation that
 * would cross the limit first makes those pools give their free physical
 * memory back and is tried again (as PyTorch releases its cached blocks).
 * Fraction 1 (the default) sets no limit. Also CUDAPluggableAllocator's
 * set_memory_fraction_fn. A fraction outside [0, 1] (NaN included) or a bad
 * device: std::invalid_argument is thrown and nothing changes. */
SOVA_API void sova_torch_set_memory_fraction(double fraction, int device);
/** The fraction last set on `device` (1.0 by default, and for a bad device). */
SOVA_API double sova_torch_memory_fraction(int device);
/** The limit in bytes the fraction gives on `device`; UINT64_MAX when none
 * (fraction 1, or a bad device). */
SOVA_API uint64_t sova_torch_memory_limit(int device);
/** Bytes reserved in the adapter's pools of `device` (its pool and its tags'
 * pools; not the segment pool), as the limit counts them before the external
 * part. 0 for a bad device. */
SOVA_API uint64_t sova_torch_reserved_bytes(int device);
/** Memory held for the process on a device outside the adapter's pools that
 * the limit must count (sova's native PyTorch backend: PyTorch's private
 * pools, their segments counted at their sizes). Called, only while a limit is
 * set, by the allocating thread outside every lock of the adapter; it must not
 * allocate through the adapter. NULL: nothing external. */
typedef uint64_t (*sovaTorchExternalReservedFn)(int device);
SOVA_API void sova_torch_set_external_reserved_fn(sovaTorchExternalReservedFn fn);

/** CUDAPluggableAllocator's set_record_stream_fn: every recordStream of the
 * allocator (Tensor.record_stream, and C++ callers such as c10d's NCCL process
 * group) reaches sova_torch_record_stream. NULL is ignored (an empty
 * tensor's storage). Throws std::runtime_error when the record cannot be kept
 * (out of host memory). */
SOVA_API void sova_torch_record_stream_hook(void* ptr, cudaStream_t stream);
/** CUDAPluggableAllocator's set_reset_fn (torch.cuda.empty_cache()):
 * sova_torch_empty_cache on every device that has a pool. Never throws. */
SOVA_API void sova_torch_empty_cache_all(void);

/** Tensor.record_stream: `stream` uses the live block at `ptr` (its start;
 * PyTorch passes the storage's base pointer). Not a live sova_torch block:
 * cudaErrorInvalidValue. Recording the allocation's own stream is harmless. */
SOVA_API int sova_torch_record_stream(void* ptr, cudaStream_t stream);

/** Statistics of the device's pool, plus the adapter's own counters. */
typedef struct sovaTorchStats {
  sovaMemPoolStats pool;      /**< set pool.structSize before the call */
  uint64_t numOoms;           /**< allocations that raised out of memory */
  uint64_t bytesAllocated;    /**< requested bytes allocated, ever */
  uint64_t bytesFreed;        /**< requested bytes freed, ever */
  uint64_t liveBlocksPeak;    /**< most blocks live at once since the last reset */
  uint64_t recordStreamWaits; /**< stream waits inserted at frees for recorded streams */
  uint64_t deferredFrees;     /**< frees deferred because their stream was being captured */
  uint64_t freeErrors;        /**< frees refused for another reason */
  uint64_t recordStreamCalls; /**< recordStream calls that reached sova (Tensor.record_stream,
                                   c10d and other C++ callers) with this device current */
} sovaTorchStats;
/** Device without a pool yet: cudaSuccess and zeros (pool.structSize kept).
 * Device out of range, NULL stats: cudaErrorInvalidValue. */
SOVA_API int sova_torch_get_stats(int device, sovaTorchStats* stats);
/** Resets the peaks (reserved, used, live blocks) to their current values. */
SOVA_API int sova_torch_reset_peak_stats(int device);
/** Releases the free physical memory of the device pool and of its segment
 * pool (sovaMemPoolTrimTo 0). */
SOVA_API int sova_torch_empty_cache(int device);
/** The device's pool handle, or NULL when none was created yet. */
SOVA_API sovaMemPool_t sova_torch_pool(int device);
/** Routes the calling thread's later allocations to tag `tag`'s own pool on
 * each device (created on first use with the adapter's options), so that a
 * tag's memory sleeps and wakes alone (sovaMemPoolSleep on
 * sova_torch_tag_pool). Tag 0: the device's pool, as without tags. Returns
 * the thread's previous tag, or -1 (nothing changed) for a tag outside 0..63.
 * Frees need no tag: a block's pool is found by its address. */
SOVA_API int sova_torch_set_tag(int tag);
/** Tag `tag`'s pool on `device`, or NULL when none was created yet (tag 0:
 * sova_torch_pool). */
SOVA_API sovaMemPool_t sova_torch_tag_pool(int tag, int device);

/** One allocator event, for PyTorch's memory snapshot format. */
typedef struct sovaTorchEvent {
  int action; /**< 0 alloc, 1 free_requested, 2 free_completed, 3 oom */
  int device;
  uint64_t addr;
  uint64_t size; /**< requested bytes (for oom: the request) */
  uint64_t stream;
  uint64_t timeUs; /**< microseconds since the epoch */
} sovaTorchEvent;
/** Starts (enabled != 0) or stops recording events, keeping at most
 * maxEntries (the oldest are dropped). Starting clears what was recorded.
 * While recording, live blocks are tracked for sova_torch_live_blocks. */
SOVA_API int sova_torch_record_history(int enabled, size_t maxEntries);
/** Copies up to `capacity` recorded events, oldest first; returns how many
 * are recorded (call with capacity 0 to size the buffer). */
SOVA_API size_t sova_torch_history(sovaTorchEvent* out, size_t capacity);
/** Live blocks allocated while recording (action 0 events): as with
 * sova_torch_history, copies up to `capacity`, returns how many there are. */
SOVA_API size_t sova_torch_live_blocks(sovaTorchEvent* out, size_t capacity);

/** Makes out-of-memory failures throw PyTorch's own c10::OutOfMemoryError,
 * resolved at run time from `libraries` (':'-separated paths of libraries
 * PyTorch has already loaded: libc10.so, libc10_cuda.so, ...; sova is not built
 * against PyTorch). The binding is checked by throwing and catching one such
 * exception at once. Returns 0, or cudaErrorNotSupported when the symbols are
 * missing or the check fails (then std::bad_alloc is thrown, which PyTorch
 * reports as RuntimeError: pytorch#133280); the reason is left for
 * sova_torch_last_error(). */
SOVA_API int sova_torch_bind_torch(const char* libraries);

/** The calling thread's last error message ("" if none). */
SOVA_API const char* sova_torch_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* SOVA_TORCH_H */
