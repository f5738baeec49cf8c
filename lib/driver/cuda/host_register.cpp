// Host memory for backups mapped, then pinned in place (Driver::host_map,
// host_unmap, host_register_on, host_unregister): the mapping is the host's
// (driver/host_pages.hpp, no CUDA call), the pinning cudaHostRegister's,
// portable so that a pool of any device copies through it, under relaxed
// capture and with the pool's device's context current, as host_alloc_on.
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/relaxed_capture.hpp"
#include "driver/cuda/runtime_call.hpp"
#include "driver/host_pages.hpp"

namespace sova::cuda_detail {

cudaError_t CudaDriver::host_map(std::size_t bytes, void** out) noexcept {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  void* p = driver_detail::map_host_pages(bytes);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  *out = p;
  return cudaSuccess;
}

cudaError_t CudaDriver::host_unmap(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  return driver_detail::unmap_host_pages(ptr, bytes) == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

cudaError_t CudaDriver::host_register_on(int device, void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr || bytes == 0) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;         // pinning never invalidates another stream's capture (relaxed_capture.hpp)
  ScopedContext context(device);  // the pool's device's, whatever the thread had
  if (context.status() != cudaSuccess) return context.status();
  return quiet([&] { return cudaHostRegister(ptr, bytes, cudaHostRegisterPortable); });
}

cudaError_t CudaDriver::host_unregister(void* ptr) noexcept {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;
  ScopedContext context{AnyContext{}};  // registered memory is portable: any context unregisters it
  if (context.status() != cudaSuccess) return context.status();
  return quiet([&] { return cudaHostUnregister(ptr); });
}

}  // namespace sova::cuda_detail
