// sova_torch — the pluggable allocator's hooks and mem_pool()'s segment
// source (graph_hooks.hpp).
#include "graph_hooks.hpp"

#include "sova_torch.h"
#include "state.hpp"
#include "tags.hpp"

#include <sova/driver.hpp>

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace sova::torch_adapter {

RelaxedCaptureMode::RelaxedCaptureMode() noexcept : previous_(cudaStreamCaptureModeRelaxed) {
  exchanged_ = process_driver().exchange_capture_mode(&previous_) == cudaSuccess;
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (exchanged_) (void)process_driver().exchange_capture_mode(&previous_);
}

namespace {

/// One stream per device, created on first use and kept for the process:
/// where mem_pool()'s segments are allocated while the caller's stream is
/// captured.
std::mutex g_segment_streams_mutex;
std::array<cudaStream_t, kMaxDevices> g_segment_streams{};  // under the mutex

cudaError_t segment_stream(int device, cudaStream_t* out) noexcept {
  std::lock_guard lock(g_segment_streams_mutex);
  cudaStream_t& s = g_segment_streams[static_cast<std::size_t>(device)];
  if (s == nullptr) {
    if (const cudaError_t err = process_driver().stream_create(device, &s); err != cudaSuccess) {
      s = nullptr;
      return err;
    }
  }
  *out = s;
  return cudaSuccess;
}

}  // namespace
}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

void sova_torch_begin_allocate_to_pool(int, TorchMempoolId, TorchStreamFilter) { flush_deferred_frees(); }

void sova_torch_end_allocate_to_pool(int, TorchMempoolId) { flush_deferred_frees(); }

void sova_torch_release_pool(int, TorchMempoolId) { flush_deferred_frees(); }

void sova_torch_record_stream_hook(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  if (sova_torch_record_stream(ptr, stream) != cudaSuccess) throw std::runtime_error(sova_torch_last_error());
}

void sova_torch_empty_cache_all(void) {
  for (int device = 0; device < kMaxDevices; ++device)
    if (sova_torch_pool(device) != nullptr) (void)sova_torch_empty_cache(device);
}

namespace {

/// The live segments of the segment pools (few, and rarely made: PyTorch keeps
/// its segments), so that a free knows which pool's counters a segment left.
std::mutex g_pool_segments_mutex;
std::unordered_set<void*> g_pool_segments;  // under the mutex

/// One segment for `stream`: from the device's segment pool when
/// `segment_pool` and the thread has no tag, else as sova_torch_malloc_nothrow.
void* one_segment(std::size_t size, int device, cudaStream_t stream, bool segment_pool) noexcept {
  if (!segment_pool || current_tag() != 0) return segment_malloc(size, device, stream);
  sovaMemPool_t pool = nullptr;
  if (segment_pool_for(device, &pool) != cudaSuccess) return nullptr;
  void* ptr = uncounted_malloc(size, pool, stream);
  if (ptr == nullptr) return nullptr;
  try {
    std::lock_guard lock(g_pool_segments_mutex);
    g_pool_segments.insert(ptr);
  } catch (...) {
    uncounted_free(ptr, stream);
    set_last_error("sova: out of host memory recording a pool segment");
    return nullptr;
  }
  return ptr;
}

void free_one_segment(void* ptr, std::size_t size, int device, cudaStream_t stream, bool segment_pool) noexcept {
  if (segment_pool) {
    bool ours = false;
    {
      std::lock_guard lock(g_pool_segments_mutex);
      ours = g_pool_segments.erase(ptr) != 0;
    }
    if (ours) {
      uncounted_free(ptr, stream);
      return;
    }
  }
  sova_torch_free(ptr, size, device, stream);
}

/// sova_torch_malloc_segment and sova_torch_malloc_pool_segment (sova_torch.h).
void* malloc_segment(std::size_t size, int device, cudaStream_t stream, bool segment_pool) noexcept {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova: device " + std::to_string(device) + " out of range");
    return nullptr;
  }
  sova::Driver& driver = sova::process_driver();
  bool capturing = false;
  if (driver.stream_is_capturing(stream, &capturing) != cudaSuccess || !capturing)
    return one_segment(size, device, stream, segment_pool);
  RelaxedCaptureMode relaxed;
  cudaStream_t own = nullptr;
  if (const cudaError_t err = segment_stream(device, &own); err != cudaSuccess) {
    set_last_error(
        "sova: cannot create the stream for segments allocated during graph capture "
        "(cudaError " +
        std::to_string(static_cast<int>(err)) + ")");
    return nullptr;
  }
  void* ptr = one_segment(size, device, own, segment_pool);
  if (ptr == nullptr) return nullptr;
  // A reused block may carry a wait for another stream's earlier free: once
  // this returns, the segment is ready for any stream.
  if (const cudaError_t err = driver.stream_synchronize(own); err != cudaSuccess) {
    free_one_segment(ptr, size, device, own, segment_pool);
    set_last_error("sova: synchronizing the segment stream failed (cudaError " + std::to_string(static_cast<int>(err)) +
                   ")");
    return nullptr;
  }
  return ptr;
}

void free_segment(void* ptr, std::size_t size, int device, cudaStream_t stream, bool segment_pool) noexcept {
  if (ptr == nullptr) return;
  sova::Driver& driver = sova::process_driver();
  bool synchronized = false;
  {
    RelaxedCaptureMode relaxed;
    synchronized = driver.device_synchronize(device) == cudaSuccess;
    if (!synchronized) (void)driver.stream_synchronize(stream);
  }
  free_one_segment(ptr, size, device, stream, segment_pool);
  // What the segment pool holds is its live segments: PyTorch counts those.
  if (segment_pool && synchronized && device >= 0 && device < kMaxDevices)
    if (sovaMemPool_t pool = sova_torch_segment_pool(device)) (void)sovaMemPoolTrimTo(pool, 0);
}

}  // namespace

void* sova_torch_malloc_segment(size_t size, int device, cudaStream_t stream) {
  return malloc_segment(size, device, stream, false);
}

void sova_torch_free_segment(void* ptr, size_t size, int device, cudaStream_t stream) {
  free_segment(ptr, size, device, stream, false);
}

void* sova_torch_malloc_pool_segment(size_t size, int device, cudaStream_t stream) {
  return malloc_segment(size, device, stream, true);
}

void sova_torch_free_pool_segment(void* ptr, size_t size, int device, cudaStream_t stream) {
  free_segment(ptr, size, device, stream, true);
}
