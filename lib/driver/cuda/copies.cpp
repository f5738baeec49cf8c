// Pinned host memory and asynchronous copies through the runtime: what a
// pool's sleep (device to host) and wake (host to device) are made of.
// Portable pinned memory, so that a pool of any device copies through it;
// cudaMemcpyDefault, so that unified addressing picks the direction. A copy
// on a created stream runs with that stream's device current (a pool's copy
// stream is its device's, whatever the calling thread's current device).
// A memset (a wake's zeroing) goes to the driver's cuMemsetD8Async, on the
// same terms.
#include "base/implicit_stream.hpp"
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/relaxed_capture.hpp"
#include "driver/cuda/runtime_call.hpp"

namespace sova::cuda_detail {

namespace {
/// cudaHostAlloc within `context` (made current by the caller).
cudaError_t pin_host(const ScopedContext& context, std::size_t bytes, void** out) noexcept {
  if (context.status() != cudaSuccess) return context.status();
  void* p = nullptr;
  const cudaError_t err = quiet([&] { return cudaHostAlloc(&p, bytes, cudaHostAllocPortable); });
  if (err != cudaSuccess) return err;
  *out = p;
  return cudaSuccess;
}
}  // namespace

cudaError_t CudaDriver::host_alloc(std::size_t bytes, void** out) noexcept {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;               // pinning never invalidates another stream's capture (relaxed_capture.hpp)
  ScopedContext context{AnyContext{}};  // the thread's context if it has one (pinned memory is portable)
  return pin_host(context, bytes, out);
}

cudaError_t CudaDriver::host_alloc_on(int device, std::size_t bytes, void** out) noexcept {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;
  ScopedContext context(device);  // the pool's device's, whatever the thread had
  return pin_host(context, bytes, out);
}

cudaError_t CudaDriver::host_free(void* ptr) noexcept {
  if (ptr == nullptr) return cudaSuccess;
  RelaxedCapture relaxed;
  ScopedContext context{AnyContext{}};
  if (context.status() != cudaSuccess) return context.status();
  return quiet([&] { return cudaFreeHost(ptr); });
}

cudaError_t CudaDriver::memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept {
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  RelaxedCapture relaxed;  // a copy on sova's own stream during another stream's capture
  auto copy = [&] { return quiet([&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream); }); };
  const bool implicit = detail::is_implicit_stream(stream);
  int device = -1;
  if (implicit || stream_device(stream, &device) != cudaSuccess) return copy();
  ScopedContext context(device);
  if (context.status() != cudaSuccess) return context.status();
  return copy();
}

cudaError_t CudaDriver::memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream) noexcept {
  if (bytes == 0) return cudaSuccess;  // the pool's probe: supported
  if (ptr == nullptr) return cudaErrorInvalidValue;
  const EntryPoints& driver = entry_points();
  if (driver.status != cudaSuccess) return driver.status;
  RelaxedCapture relaxed;
  auto set = [&] {
    return to_runtime_error(driver.memset_d8_async(reinterpret_cast<CUdeviceptr>(ptr),
                                                   static_cast<unsigned char>(value), bytes,
                                                   reinterpret_cast<CUstream>(stream)));
  };
  // The driver API needs a context current (the runtime would make one): a
  // created stream's device's; for the implicit streams, the thread's or any.
  int device = -1;
  if (detail::is_implicit_stream(stream) || stream_device(stream, &device) != cudaSuccess) {
    ScopedContext context{AnyContext{}};
    if (context.status() != cudaSuccess) return context.status();
    return set();
  }
  ScopedContext context(device);
  if (context.status() != cudaSuccess) return context.status();
  return set();
}

}  // namespace sova::cuda_detail
