// sova_torch — the pluggable allocator's hooks and mem_pool()'s segment
// source (graph_hooks.hpp).
#include "graph_hooks.hpp"

#include "sova_torch.h"
#include "state.hpp"

#include <sova/driver.hpp>

#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>

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

void* sova_torch_malloc_segment(size_t size, int device, cudaStream_t stream) {
  if (device < 0 || device >= kMaxDevices) {
    set_last_error("sova: device " + std::to_string(device) + " out of range");
    return nullptr;
  }
  sova::Driver& driver = sova::process_driver();
  bool capturing = false;
  if (driver.stream_is_capturing(stream, &capturing) != cudaSuccess || !capturing)
    return sova_torch_malloc_nothrow(size, device, stream);
  RelaxedCaptureMode relaxed;
  cudaStream_t own = nullptr;
  if (const cudaError_t err = segment_stream(device, &own); err != cudaSuccess) {
    set_last_error(
        "sova: cannot create the stream for segments allocated during graph capture "
        "(cudaError " +
        std::to_string(static_cast<int>(err)) + ")");
    return nullptr;
  }
  void* ptr = sova_torch_malloc_nothrow(size, device, own);
  if (ptr == nullptr) return nullptr;
  // A reused block may carry a wait for another stream's earlier free: once
  // this returns, the segment is ready for any stream.
  if (const cudaError_t err = driver.stream_synchronize(own); err != cudaSuccess) {
    sova_torch_free(ptr, size, device, own);
    set_last_error("sova: synchronizing the segment stream failed (cudaError " + std::to_string(static_cast<int>(err)) +
                   ")");
    return nullptr;
  }
  return ptr;
}

void sova_torch_free_segment(void* ptr, size_t size, int device, cudaStream_t stream) {
  if (ptr == nullptr) return;
  sova::Driver& driver = sova::process_driver();
  {
    RelaxedCaptureMode relaxed;
    if (driver.device_synchronize(device) != cudaSuccess) (void)driver.stream_synchronize(stream);
  }
  sova_torch_free(ptr, size, device, stream);
}
