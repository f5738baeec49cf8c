// sova_torch — per-device pools and the CUDAPluggableAllocator entry points
// (sova_torch.h).
#include "history.hpp"
#include "memory_limit.hpp"
#include "record_streams.hpp"
#include "sova_torch.h"
#include "state.hpp"
#include "tags.hpp"
#include "torch_errors.hpp"

#include <sova/driver.hpp>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace sova::torch_adapter {

State& state() noexcept {
  static State s;
  return s;
}

namespace {

thread_local std::string t_last_error;

/// Frees refused because their stream was under graph capture, retried at
/// every later allocation and free until their stream is no longer captured.
std::mutex g_deferred_mutex;
std::vector<std::pair<void*, cudaStream_t>> g_deferred;  // under g_deferred_mutex
std::atomic<bool> g_any_deferred{false};

[[gnu::noinline]] void flush_deferred() noexcept {
  std::lock_guard lock(g_deferred_mutex);
  std::vector<std::pair<void*, cudaStream_t>> still;
  for (const auto& [ptr, stream] : g_deferred)
    if (sovaFreeAsync(ptr, stream) == cudaErrorStreamCaptureUnsupported) still.emplace_back(ptr, stream);
  g_deferred.swap(still);
  g_any_deferred.store(!g_deferred.empty(), std::memory_order_relaxed);
}

inline void maybe_flush_deferred() noexcept {
  if (g_any_deferred.load(std::memory_order_relaxed)) flush_deferred();
}

std::string error_text(cudaError_t err) { return std::to_string(static_cast<int>(err)); }

/// The device's pool, created on first use. Sets the message and returns
/// the error on failure.
[[gnu::noinline]] cudaError_t create_pool(int device, sovaMemPool_t* out) noexcept {
  State& s = state();
  std::lock_guard lock(s.mutex);
  DeviceState& d = s.devices[device];
  if (sovaMemPool_t p = d.pool.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  sovaMemPool_t pool = nullptr;
  bool create_failed = false;
  // The untagged pool never sleeps through sova.torch: it pins nothing ahead.
  sovaTorchOptions options = s.options;
  options.flags &= ~static_cast<unsigned>(sovaMemPoolSleepPinAhead);
  cudaError_t err = create_pool_with_options(options, device, &pool, &create_failed);
  if (create_failed) {
    set_last_error("sova: cannot create the pool of device " + std::to_string(device) +
                   " (sovaMemPoolCreate: cudaError " + error_text(err) +
                   (err == cudaErrorInvalidValue ? ", no such device" : "") + ")");
    return err;
  }
  if (err == cudaSuccess) {
    err = sovaDeviceSetMemPool(device, pool);
    if (err != cudaSuccess) (void)sovaMemPoolDestroy(pool);
  }
  if (err != cudaSuccess) {
    set_last_error("sova: cannot set up the pool of device " + std::to_string(device) + " (cudaError " +
                   error_text(err) + ")");
    return err;
  }
  s.any_pool = true;
  d.pool.store(pool, std::memory_order_release);
  *out = pool;
  return cudaSuccess;
}

inline cudaError_t pool_for(int device, sovaMemPool_t* out) noexcept {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova: device " + std::to_string(device) + " out of range");
    return cudaErrorInvalidDevice;
  }
  // A thread under a tag (sova.torch.tag): that tag's pool (tags.hpp).
  if (const int tag = current_tag(); tag != 0) [[unlikely]]
    return tagged_pool_for(tag, device, out);
  if (sovaMemPool_t p = state().devices[device].pool.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  return create_pool(device, out);
}

std::string oom_message(std::size_t size, int device, sovaMemPool_t pool) {
  sovaMemPoolStats st;
  std::memset(&st, 0, sizeof st);
  st.structSize = sizeof st;
  (void)sovaMemPoolGetStats(pool, &st);
  std::size_t free_bytes = 0, total_bytes = 0;
  const bool have_info = process_driver().memory_info(device, &free_bytes, &total_bytes) == cudaSuccess;
  // PyTorch's own words first ("Tried to allocate X. GPU N has a total
  // capacity of T of which F is free."), which scripts and tests match.
  std::string m = "CUDA out of memory (sova). Tried to allocate " + format_bytes(size);
  if (have_info)
    m += ". GPU " + std::to_string(device) + " has a total capacity of " + format_bytes(total_bytes) + " of which " +
         format_bytes(free_bytes) + " is free.";
  else
    m += " on device " + std::to_string(device) + ".";
  m += " The sova pool holds " + format_bytes(st.reservedCurrent) + " reserved, " + format_bytes(st.usedCurrent) +
       " live in " + std::to_string(st.liveBlocks) + " blocks; its largest free block is " +
       format_bytes(st.largestFreeBlock) + ".";
  return m;
}

/// The bookkeeping of a successful allocation of `size` bytes at `ptr`.
inline void note_allocation(DeviceState& d, void* ptr, std::size_t size, int device, cudaStream_t stream) noexcept {
  d.bytes_allocated.fetch_add(size, std::memory_order_relaxed);
  const std::uint64_t live = d.live_blocks.fetch_add(1, std::memory_order_relaxed) + 1;
  std::uint64_t peak = d.live_blocks_peak.load(std::memory_order_relaxed);
  while (live > peak && !d.live_blocks_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
  maybe_history(0, device, ptr, size, stream);
}

/// Out of memory: counted, recorded, and the message set (`why` appended).
void note_out_of_memory(DeviceState& d, std::size_t size, int device, cudaStream_t stream, sovaMemPool_t pool,
                        const std::string& why) noexcept {
  d.num_ooms.fetch_add(1, std::memory_order_relaxed);
  maybe_history(3, device, nullptr, size, stream);
  try {
    set_last_error(oom_message(size, device, pool) + why);
  } catch (...) {
    set_last_error("CUDA out of memory (sova)");
  }
}

std::string limit_text(int device, std::uint64_t limit) {
  return std::string(" The per-process memory fraction (torch.cuda.set_per_process_memory_fraction) of device ")
      .append(std::to_string(device))
      .append(" is ")
      .append(std::to_string(sova_torch_memory_fraction(device)))
      .append(": at most ")
      .append(format_bytes(limit))
      .append(" reserved, which this allocation would exceed.");
}

/// An allocation under a memory limit (sova_torch_set_memory_fraction): one
/// that would leave more reserved than the limit is freed; the pools then give
/// their free physical memory back and it is tried once more.
[[gnu::noinline]] cudaError_t limited_malloc(void** ptr, std::size_t size, int device, cudaStream_t stream,
                                             sovaMemPool_t pool, std::uint64_t limit) noexcept {
  DeviceState& d = state().devices[device];
  const std::uint64_t used = limit_counted(device, cudaMemPoolAttrUsedMemCurrent);
  cudaError_t err = cudaErrorMemoryAllocation;
  if (used <= limit && size <= limit - used) {  // else no release could make room
    for (int attempt = 0; attempt < 2; ++attempt) {
      err = sovaMallocFromPoolAsync(ptr, size, pool, stream);
      if (err != cudaSuccess || *ptr == nullptr) return err;
      if (limit_counted(device, cudaMemPoolAttrReservedMemCurrent) <= limit) return cudaSuccess;
      (void)sovaFreeAsync(*ptr, stream);
      *ptr = nullptr;
      err = cudaErrorMemoryAllocation;
      bool capturing = false;
      if (attempt == 1 || process_driver().stream_is_capturing(stream, &capturing) != cudaSuccess || capturing) break;
      release_free_memory(device);
    }
  }
  try {
    note_out_of_memory(d, size, device, stream, pool, limit_text(device, limit));
  } catch (...) {
    note_out_of_memory(d, size, device, stream, pool, "");
  }
  return err;
}

/// The allocation proper; on failure sets the message and returns the error.
inline cudaError_t do_malloc(void** ptr, std::size_t size, int device, cudaStream_t stream,
                             bool limited = true) noexcept {
  *ptr = nullptr;
  maybe_flush_deferred();
  sovaMemPool_t pool = nullptr;
  if (const cudaError_t err = pool_for(device, &pool); err != cudaSuccess) return err;
  DeviceState& d = state().devices[device];
  const std::uint64_t limit = d.limit.load(std::memory_order_relaxed);
  cudaError_t err = cudaSuccess;
  if (limit != kNoLimit && limited) [[unlikely]] {
    err = limited_malloc(ptr, size, device, stream, pool, limit);
    if (err == cudaErrorMemoryAllocation) return err;  // counted and said there
  } else {
    err = sovaMallocFromPoolAsync(ptr, size, pool, stream);
  }
  if (err == cudaSuccess) {
    if (*ptr == nullptr) return cudaSuccess;  // size 0
    note_allocation(d, *ptr, size, device, stream);
    return cudaSuccess;
  }
  if (err == cudaErrorMemoryAllocation) {
    note_out_of_memory(d, size, device, stream, pool, "");
  } else if (err == cudaErrorStreamCaptureUnsupported) {
    set_last_error("sova refused an allocation of " + std::to_string(size) +
                   " bytes on a stream under CUDA graph capture (torch.cuda.graph, "
                   "make_graphed_callables; cudaErrorStreamCaptureUnsupported): "
                   "docs/python.md, \"CUDA graphs\", says what is served.");
  } else {
    // The C API's own words follow (a stream value that names no stream, ...).
    set_last_error("sova: allocation of " + std::to_string(size) + " bytes on device " + std::to_string(device) +
                   " failed (cudaError " + error_text(err) + "): " + sovaGetLastErrorMessage());
  }
  return err;
}

}  // namespace

void flush_deferred_frees() noexcept { maybe_flush_deferred(); }

void set_last_error(std::string message) noexcept {
  try {
    t_last_error = std::move(message);
  } catch (...) {
  }
}

std::string format_bytes(std::uint64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / double(1u << 30);
  if (bytes >= (std::uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  else
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(bytes) / double(1u << 20));
  return buf;
}

cudaError_t create_pool_with_options(const sovaTorchOptions& options, int device, sovaMemPool_t* out,
                                     bool* create_failed) noexcept {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.device = device;
  props.policy = static_cast<sovaPolicy>(options.policy);
  props.maxSize = options.maxSize;
  props.handleTypes = cudaMemHandleTypeNone;
  props.flags = options.flags;
  props.sleepHostBudget = options.sleepHostBudget;
  sovaMemPool_t pool = nullptr;
  cudaError_t err = sovaMemPoolCreate(&pool, &props);
  *create_failed = err != cudaSuccess;
  if (err != cudaSuccess) return err;
  std::uint64_t threshold = options.releaseThreshold;
  err = sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (err != cudaSuccess) {
    (void)sovaMemPoolDestroy(pool);
    return err;
  }
  *out = pool;
  return cudaSuccess;
}

cudaError_t segment_pool_for(int device, sovaMemPool_t* out) noexcept {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova: device " + std::to_string(device) + " out of range");
    return cudaErrorInvalidDevice;
  }
  State& s = state();
  DeviceState& d = s.devices[device];
  if (sovaMemPool_t p = d.segment_pool.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  std::lock_guard lock(s.mutex);
  if (sovaMemPool_t p = d.segment_pool.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  sovaTorchOptions options = s.options;  // it never sleeps: nothing pinned ahead
  options.flags &= ~static_cast<unsigned>(sovaMemPoolSleepPinAhead);
  sovaMemPool_t pool = nullptr;
  bool create_failed = false;
  const cudaError_t err = create_pool_with_options(options, device, &pool, &create_failed);
  if (err != cudaSuccess) {
    set_last_error("sova: cannot create the segment pool of device " + std::to_string(device) + " (cudaError " +
                   error_text(err) + ")");
    return err;
  }
  s.any_pool = true;
  d.segment_pool.store(pool, std::memory_order_release);
  *out = pool;
  return cudaSuccess;
}

void* segment_malloc(std::size_t size, int device, cudaStream_t stream) noexcept {
  void* ptr = nullptr;
  (void)do_malloc(&ptr, size, device, stream, false);
  return ptr;
}

void* uncounted_malloc(std::size_t size, sovaMemPool_t pool, cudaStream_t stream) noexcept {
  maybe_flush_deferred();
  void* ptr = nullptr;
  const cudaError_t err = sovaMallocFromPoolAsync(&ptr, size, pool, stream);
  if (err == cudaSuccess) return ptr;
  set_last_error(std::string("sova: a pool segment of ")
                     .append(format_bytes(size))
                     .append(" could not be allocated (cudaError ")
                     .append(error_text(err))
                     .append("): ")
                     .append(sovaGetLastErrorMessage()));
  return nullptr;
}

void uncounted_free(void* ptr, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return;
  maybe_flush_deferred();
  const cudaError_t err = sovaFreeAsync(ptr, stream);
  if (err == cudaErrorStreamCaptureUnsupported) {
    try {
      std::lock_guard lock(g_deferred_mutex);
      g_deferred.emplace_back(ptr, stream);
      g_any_deferred.store(true, std::memory_order_relaxed);
      return;
    } catch (...) {
    }
  }
  if (err != cudaSuccess) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      std::fprintf(stderr, "sova.torch: the free of pool segment %p was refused (cudaError %d)\n", ptr,
                   static_cast<int>(err));
  }
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

int sova_torch_configure(const sovaTorchOptions* options) {
  if (options == nullptr) {
    set_last_error("sova_torch_configure: options is NULL");
    return cudaErrorInvalidValue;
  }
  constexpr unsigned kKnown =
      sovaMemPoolNoStreamChecks | sovaMemPoolNoRemap | sovaMemPoolThoroughRemap | sovaMemPoolSleepPinAhead;
  constexpr unsigned kRemap = sovaMemPoolNoRemap | sovaMemPoolThoroughRemap;
  if (options->policy < sovaPolicyDefault || options->policy > sovaPolicyBestFit || (options->flags & ~kKnown) != 0 ||
      (options->flags & kRemap) == kRemap) {
    set_last_error("sova_torch_configure: unknown policy or flags, or remapping both off and thorough");
    return cudaErrorInvalidValue;
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.any_pool) {
    set_last_error(
        "sova_torch_configure: pools already exist; options apply only before the "
        "first allocation");
    return cudaErrorInvalidValue;
  }
  s.options = *options;
  return cudaSuccess;
}

void* sova_torch_malloc(size_t size, int device, cudaStream_t stream) {
  void* ptr = nullptr;
  const cudaError_t err = do_malloc(&ptr, size, device, stream);
  if (err == cudaSuccess) return ptr;
  if (err == cudaErrorMemoryAllocation) throw_out_of_memory(t_last_error);
  throw std::runtime_error(t_last_error);
}

void* sova_torch_malloc_nothrow(size_t size, int device, cudaStream_t stream) {
  void* ptr = nullptr;
  (void)do_malloc(&ptr, size, device, stream);
  return ptr;
}

int sova_torch_try_malloc(void** ptr, size_t size, int device, cudaStream_t stream) {
  if (ptr == nullptr) {
    set_last_error("sova_torch_try_malloc: ptr is NULL");
    return cudaErrorInvalidValue;
  }
  return do_malloc(ptr, size, device, stream);
}

void sova_torch_free(void* ptr, size_t size, int device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  maybe_flush_deferred();
  DeviceState* d = (device >= 0 && device < kMaxDevices) ? &state().devices[device] : nullptr;
  const std::uint64_t waits = order_recorded_streams(ptr, stream);
  maybe_history(1, device, ptr, size, stream);
  const cudaError_t err = sovaFreeAsync(ptr, stream);
  if (err == cudaSuccess) {
    if (d != nullptr) {
      d->record_stream_waits.fetch_add(waits, std::memory_order_relaxed);
      d->bytes_freed.fetch_add(size, std::memory_order_relaxed);
      d->live_blocks.fetch_sub(1, std::memory_order_relaxed);
    }
    maybe_history(2, device, ptr, size, stream);
    return;
  }
  if (err == cudaErrorStreamCaptureUnsupported) {
    try {
      std::lock_guard lock(g_deferred_mutex);
      g_deferred.emplace_back(ptr, stream);
      g_any_deferred.store(true, std::memory_order_relaxed);
      if (d != nullptr) {
        d->deferred_frees.fetch_add(1, std::memory_order_relaxed);
        d->bytes_freed.fetch_add(size, std::memory_order_relaxed);
        d->live_blocks.fetch_sub(1, std::memory_order_relaxed);
      }
      return;
    } catch (...) {
    }
  }
  if (d != nullptr) d->free_errors.fetch_add(1, std::memory_order_relaxed);
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    std::fprintf(stderr,
                 "sova.torch: a free of %p on device %d was refused (cudaError %d); "
                 "further refusals are only counted (freeErrors)\n",
                 ptr, device, static_cast<int>(err));
}

int sova_torch_record_stream(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) {
    set_last_error("sova_torch_record_stream: NULL pointer");
    return cudaErrorInvalidValue;
  }
  // Counted on the current device (PyTorch's callers hold a device guard):
  // asking the stream's device could invalidate a capture that records it.
  int device = -1;
  if (sova::process_driver().current_device(&device) == cudaSuccess && device >= 0 && device < kMaxDevices)
    state().devices[device].record_stream_calls.fetch_add(1, std::memory_order_relaxed);
  try {
    record_stream(ptr, stream);
  } catch (...) {
    set_last_error("sova_torch_record_stream: out of host memory");
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

int sova_torch_get_stats(int device, sovaTorchStats* stats) {
  if (stats == nullptr || device < 0 || device >= kMaxDevices) {
    set_last_error("sova_torch_get_stats: NULL stats or device out of range");
    return cudaErrorInvalidValue;
  }
  const std::size_t pool_size = stats->pool.structSize;
  std::memset(stats, 0, sizeof *stats);
  stats->pool.structSize = pool_size;
  DeviceState& d = state().devices[device];
  if (sovaMemPool_t pool = d.pool.load(std::memory_order_acquire)) {
    if (const cudaError_t err = sovaMemPoolGetStats(pool, &stats->pool); err != cudaSuccess) {
      set_last_error("sova_torch_get_stats: sovaMemPoolGetStats failed (structSize?)");
      return err;
    }
  }
  stats->numOoms = d.num_ooms.load(std::memory_order_relaxed);
  stats->bytesAllocated = d.bytes_allocated.load(std::memory_order_relaxed);
  stats->bytesFreed = d.bytes_freed.load(std::memory_order_relaxed);
  stats->liveBlocksPeak = d.live_blocks_peak.load(std::memory_order_relaxed);
  stats->recordStreamWaits = d.record_stream_waits.load(std::memory_order_relaxed);
  stats->deferredFrees = d.deferred_frees.load(std::memory_order_relaxed);
  stats->freeErrors = d.free_errors.load(std::memory_order_relaxed);
  stats->recordStreamCalls = d.record_stream_calls.load(std::memory_order_relaxed);
  return cudaSuccess;
}

int sova_torch_reset_peak_stats(int device) {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova_torch_reset_peak_stats: device out of range");
    return cudaErrorInvalidValue;
  }
  DeviceState& d = state().devices[device];
  d.live_blocks_peak.store(d.live_blocks.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (sovaMemPool_t pool = d.pool.load(std::memory_order_acquire)) {
    std::uint64_t zero = 0;
    cudaError_t err = sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
    if (err == cudaSuccess) err = sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
    return err;
  }
  return cudaSuccess;
}

int sova_torch_empty_cache(int device) {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova_torch_empty_cache: device out of range");
    return cudaErrorInvalidValue;
  }
  maybe_flush_deferred();
  DeviceState& d = state().devices[device];
  if (sovaMemPool_t segments = d.segment_pool.load(std::memory_order_acquire)) (void)sovaMemPoolTrimTo(segments, 0);
  if (sovaMemPool_t pool = d.pool.load(std::memory_order_acquire)) return sovaMemPoolTrimTo(pool, 0);
  return cudaSuccess;
}

sovaMemPool_t sova_torch_segment_pool(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return state().devices[device].segment_pool.load(std::memory_order_acquire);
}

sovaMemPool_t sova_torch_pool(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return state().devices[device].pool.load(std::memory_order_acquire);
}

const char* sova_torch_last_error(void) { return t_last_error.c_str(); }
