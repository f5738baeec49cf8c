// sova C API — the fast path: sovaMallocAsync, sovaFreeAsync,
// sovaMallocFromPoolAsync and their per-thread-default-stream variants.
//
// Budget: a malloc/free pair costs ~50-100 ns, most of it in Pool. What this
// layer adds: one ReadSection per call (two thread-private stores, ~1 ns);
// one atomic load per table (the device's current pool, the handle's slot);
// for sovaMallocAsync, where the driver has several devices, the stream's
// device from a process-wide cache (stream_devices.hpp: one load; for the
// special handles the current device, cached per thread) and afterwards the
// pool's own view of the stream's device (a thread-local compare); for a free,
// Pool::contains over the listed pools but the last (none when there is one
// pool). No lock, no write to a line other threads write, no allocation.
// Measured on the sim, host of 2 cores: ~5 ns per pair over Pool's own
// try_allocate/try_deallocate (perf: 20% of a 25 ns pair on the legacy stream).
// The rare cases (first use of a device, a free into a destroyed pool) are
// noinline functions.
#include "capi/capi_errors.hpp"
#include "capi/imported_pools.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"
#include "capi/stream_devices.hpp"

#include <sova/sova.h>

#include <cstdio>
#include <string>

namespace sova::capi {
namespace {

/// _ptsz: stream 0 is the calling thread's default stream. Handles other than
/// 0 (cudaStreamLegacy included) keep their meaning, as in the runtime.
inline cudaStream_t per_thread_if_zero(cudaStream_t stream) noexcept {
  return stream == nullptr ? cudaStreamPerThread : stream;
}

/// Why `pool` refused an allocation, with its figures, for the thread's last
/// error message (Pool::describe_allocation_failure). Called while the
/// caller's ReadSection still holds the pool.
[[gnu::cold, gnu::noinline]] void note_malloc_refused(const sova::Pool& pool, std::size_t size,
                                                      cudaStream_t stream, cudaError_t err) noexcept {
  try {
    // The head as record_malloc_error writes it, the pool's words after.
    char head[200];
    if (err == cudaErrorInvalidResourceHandle) {
      std::snprintf(head, sizeof head, "allocating %zu bytes on stream %p failed: %s: ", size,
                    static_cast<void*>(stream), cudaGetErrorName(err));
    } else {
      std::snprintf(head, sizeof head, "allocating %zu bytes failed: %s (%s): ", size, cudaGetErrorName(err),
                    err == cudaErrorMemoryAllocation ? "out of memory" : cudaGetErrorString(err));
    }
    if (err == cudaErrorNotPermitted) return;  // asleep: record_malloc_error's words say all
    note_detail(err, (head + pool.describe_allocation_failure(size, err)).c_str());
  } catch (...) {
    // No host memory for the words: record_malloc_error's shorter ones.
  }
}

/// First allocation on a device (or before any pool exists): creates the
/// device's default pool, then allocates from its current pool. `device`:
/// the stream's, or -1 when not asked yet (no pool existed).
[[gnu::noinline]] cudaError_t malloc_first_use(void** ptr, std::size_t size, cudaStream_t stream,
                                               int device) noexcept {
  if (device < 0) {
    if (const cudaError_t err = stream_device_of(*pools_driver(), stream, &device); err != cudaSuccess) return err;
  }
  if (const cudaError_t err = check_device(device, cudaErrorInvalidDevice); err != cudaSuccess) return err;
  PoolEntry* fallback = nullptr;
  if (const cudaError_t err = ensure_default_pool(device, &fallback); err != cudaSuccess) return err;
  ReadSection section;
  PoolEntry* e = g_state.devices.current(device);
  // Never null once the default exists; the default is never deleted.
  if (e == nullptr) e = fallback;
  const cudaError_t err = e->pool.try_allocate(ptr, size, stream);
  if (err != cudaSuccess) note_malloc_refused(e->pool, size, stream, err);
  return err;
}

/// `*ptr` came from `e`, the pool of the device the cache named for `stream`,
/// but that pool found the handle to name a stream of `device` (a destroyed
/// stream's handle, reused on another device): gives the block back (nothing
/// was ordered on it yet), corrects the cache and allocates from `device`'s
/// current pool. Ends `section`.
[[gnu::noinline]] cudaError_t malloc_on_other_device(PoolEntry* e, void** ptr, std::size_t size, cudaStream_t stream,
                                                     int device, ReadSection& section) noexcept {
  (void)e->pool.try_deallocate(*ptr, stream);
  *ptr = nullptr;
  section.leave();
  g_stream_devices.remember(stream, device);
  {
    ReadSection again;
    if (PoolEntry* other = g_state.devices.current(device)) return other->pool.try_allocate(ptr, size, stream);
  }
  return malloc_first_use(ptr, size, stream, device);
}

inline cudaError_t malloc_current(void** ptr, std::size_t size, cudaStream_t stream) noexcept {
  if (ptr == nullptr) [[unlikely]]
    return cudaErrorInvalidValue;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  cudaError_t err;
  if (Driver* driver = g_state.driver.load(std::memory_order_acquire)) [[likely]] {
    // cudaMallocAsync: the stream's device's current pool. With one device
    // there is nothing to ask; an invalid handle is then refused by the pool's
    // stream checks (and not at all where a pool has them off, as
    // sovaMallocFromPoolAsync never asks).
    int device = 0;
    const bool one_device = g_state.one_device.load(std::memory_order_relaxed);
    err = one_device ? cudaSuccess : stream_device_of(*driver, stream, &device);
    if (err == cudaSuccess) [[likely]] {
      ReadSection section;
      if (PoolEntry* e = g_state.devices.current(device)) [[likely]] {
        err = e->pool.try_allocate(ptr, size, stream);
        if (err == cudaSuccess) [[likely]] {
          if (one_device || is_implicit_stream(stream)) return err;
          // The pool checked the stream's id: where the handle now names a
          // stream of another device, it asked which (Pool::stream_device).
          const int seen = e->pool.stream_device(stream);
          if (seen < 0 || seen == device) [[likely]]
            return err;
          return malloc_on_other_device(e, ptr, size, stream, seen, section);
        }
        *ptr = nullptr;
        note_malloc_refused(e->pool, size, stream, err);
        return err;
      }
      section.leave();
      err = malloc_first_use(ptr, size, stream, device);
    }
  } else {
    err = malloc_first_use(ptr, size, stream, -1);
  }
  if (err != cudaSuccess) *ptr = nullptr;
  return err;
}

inline cudaError_t malloc_from(void** ptr, std::size_t size, sovaMemPool_t pool, cudaStream_t stream) noexcept {
  if (ptr == nullptr) [[unlikely]]
    return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) [[unlikely]] {
    *ptr = nullptr;
    return note_pool_handle_refused(pool);
  }
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const cudaError_t err = e->pool.try_allocate(ptr, size, stream);
  if (err != cudaSuccess) [[unlikely]] {
    *ptr = nullptr;
    note_malloc_refused(e->pool, size, stream, err);
  }
  return err;
}

/// Why `pool` refused to free `ptr`, for the thread's last error message.
[[gnu::cold, gnu::noinline]] void note_free_refused(const sova::Pool& pool, const void* ptr, cudaStream_t stream,
                                                    cudaError_t err) noexcept {
  char text[320];
  try {
    if (pool.block_size(ptr) != 0) {  // a live block's start: the stream was refused, not the pointer
      std::snprintf(text, sizeof text, "freeing %p on stream %p failed: %s (%s)", ptr, static_cast<void*>(stream),
                    cudaGetErrorName(err),
                    err == cudaErrorInvalidResourceHandle
                        ? "the stream value names no stream (never created, or destroyed); the block stays live: "
                          "free it on a live stream, or 0"
                        : cudaGetErrorString(err));
    } else {
      std::snprintf(text, sizeof text, "cannot free %p: %s", ptr, pool.describe_pointer(ptr).c_str());
    }
  } catch (...) {
    return;  // no host memory for the words: the code alone is recorded
  }
  note_detail(err, text);
}

/// A free of a pointer that no pool of this process lists: an imported
/// pointer (sovaMemPoolImportPointer), or one sova never handed out.
[[gnu::noinline]] cudaError_t free_outside_pools(void* ptr, cudaStream_t stream) noexcept {
  const cudaError_t err = free_imported(ptr, stream);
  if (err == cudaErrorInvalidValue) [[unlikely]] {
    char text[160];
    std::snprintf(text, sizeof text, "cannot free %p: not allocated by sova (no sova pool holds a block there)", ptr);
    note_detail(err, text);
  }
  return err;
}

/// An allocation's failure, with its size, as the thread's last error
/// message: the pool's own words where it refused (note_malloc_refused),
/// else these, for a refusal before any pool was asked (the stream's device
/// unknown to the driver, a refused pool handle's own words kept too).
[[gnu::cold, gnu::noinline]] cudaError_t record_malloc_error(const char* function, cudaError_t err,
                                                             std::size_t size) noexcept {
  if (!detail_noted(err)) {
    char text[240];
    std::snprintf(text, sizeof text, "allocating %zu bytes failed: %s (%s)", size, cudaGetErrorName(err),
                  err == cudaErrorMemoryAllocation ? "out of memory"
                  : err == cudaErrorNotPermitted   ? "the pool is asleep (sovaMemPoolSleep): wake it first"
                  : err == cudaErrorInvalidResourceHandle
                      ? "the stream value names no stream (never created, or destroyed); pass a live stream, or 0"
                      : cudaGetErrorString(err));
    note_detail(err, text);
  }
  return record_error(function, err);
}

/// A free into a destroyed pool: the free that returns its last block
/// finalizes it (pool_lifetime.hpp). Ends `section`.
[[gnu::noinline]] void after_free_in_destroyed(PoolEntry* e, ReadSection& section) noexcept {
  const bool claimed = claim_finalization(e);
  section.leave();
  if (claimed) finalize_pool(e);
}

inline cudaError_t free_impl(void* ptr, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return cudaSuccess;
  ReadSection section;
  // Not in any sova pool (a host pointer, cudaMalloc memory, a pool already
  // finalized): no pool listed, or try_deallocate of the candidate refuses it.
  // The runtime accepts cudaMalloc memory; sova cannot free it.
  PoolEntry* e = g_state.owners.find_for_free(ptr);
  if (e == nullptr) [[unlikely]] {
    section.leave();
    return free_outside_pools(ptr, stream);  // an imported pointer, or nobody's
  }
  // An exported block's export data goes stale before the block can be reused.
  if (PoolExporter* x = e->exporter.load(std::memory_order_acquire)) [[unlikely]]
    x->forget(ptr);
  const cudaError_t err = e->pool.try_deallocate(ptr, stream);
  if (err == cudaErrorInvalidValue && !e->pool.contains(ptr)) [[unlikely]] {
    section.leave();
    return free_outside_pools(ptr, stream);
  }
  if (err != cudaSuccess) [[unlikely]]
    note_free_refused(e->pool, ptr, stream, err);  // the pool is still held
  if (e->destroyed.load(std::memory_order_acquire)) [[unlikely]] {
    if (err == cudaSuccess) after_free_in_destroyed(e, section);
  }
  return err;
}

}  // namespace
}  // namespace sova::capi

using namespace sova::capi;

// Each records its failure as the thread's last error (last_error.hpp) in a
// cold call: the success path gains one predicted branch.
cudaError_t sovaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  const cudaError_t err = malloc_current(devPtr, size, stream);
  if (err != cudaSuccess) [[unlikely]]
    return record_malloc_error(__func__, err, size);
  return err;
}

cudaError_t sovaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  const cudaError_t err = malloc_current(devPtr, size, per_thread_if_zero(stream));
  if (err != cudaSuccess) [[unlikely]]
    return record_malloc_error(__func__, err, size);
  return err;
}

cudaError_t sovaFreeAsync(void* devPtr, cudaStream_t stream) { return checked(__func__, free_impl(devPtr, stream)); }

cudaError_t sovaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) {
  return checked(__func__, free_impl(devPtr, per_thread_if_zero(stream)));
}

cudaError_t sovaMallocFromPoolAsync(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  const cudaError_t err = malloc_from(devPtr, size, pool, stream);
  if (err != cudaSuccess) [[unlikely]]
    return record_malloc_error(__func__, err, size);
  return err;
}

cudaError_t sovaMallocFromPoolAsync_ptsz(void** devPtr, size_t size, sovaMemPool_t pool, cudaStream_t stream) {
  const cudaError_t err = malloc_from(devPtr, size, pool, per_thread_if_zero(stream));
  if (err != cudaSuccess) [[unlikely]]
    return record_malloc_error(__func__, err, size);
  return err;
}

namespace sova::capi {
namespace {
cudaError_t stream_synchronized_impl(sovaMemPool_t pool, cudaStream_t stream) noexcept {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  try {
    e->pool.stream_synchronized(stream);
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
}  // namespace
}  // namespace sova::capi

static cudaError_t sovaMemPoolStreamSynchronized_unchecked(sovaMemPool_t pool, cudaStream_t stream) {
  return stream_synchronized_impl(pool, stream);
}
cudaError_t sovaMemPoolStreamSynchronized(sovaMemPool_t pool, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolStreamSynchronized_unchecked(pool, stream));
}

static cudaError_t sovaMemPoolStreamSynchronized_ptsz_unchecked(sovaMemPool_t pool, cudaStream_t stream) {
  return stream_synchronized_impl(pool, per_thread_if_zero(stream));
}
cudaError_t sovaMemPoolStreamSynchronized_ptsz(sovaMemPool_t pool, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolStreamSynchronized_ptsz_unchecked(pool, stream));
}
