// Pinned host memory and asynchronous copies through the runtime: what a
// pool's sleep (device to host) and wake (host to device) are made of.
// Portable pinned memory, so that a pool of any device copies through it;
// cudaMemcpyDefault, so that unified addressing picks the direction.
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/runtime_call.hpp"

namespace sova::cuda_detail {

cudaError_t CudaDriver::host_alloc(std::size_t bytes, void** out) noexcept {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  void* p = nullptr;
  const cudaError_t err = quiet([&] { return cudaHostAlloc(&p, bytes, cudaHostAllocPortable); });
  if (err != cudaSuccess) return err;
  *out = p;
  return cudaSuccess;
}

cudaError_t CudaDriver::host_free(void* ptr) noexcept {
  if (ptr == nullptr) return cudaSuccess;
  return quiet([&] { return cudaFreeHost(ptr); });
}

cudaError_t CudaDriver::memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept {
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  if (bytes == 0) return cudaSuccess;
  return quiet([&] { return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream); });
}

}  // namespace sova::cuda_detail
