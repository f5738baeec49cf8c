// The real CUDA driver's host memory for backups (Driver::host_map,
// host_register_on, host_unregister, host_unmap) on a GPU: mapped aligned,
// locked so that the copy engines read and write it (cudaPointerGetAttributes
// says host memory the device reaches), bytes round-tripped through the
// device, a register from a thread that never used CUDA (the device's
// context made current for it), a second registration of the same range
// refused with nothing changed, and the last-error state left clean.
// Suite 'gpu'.
#include "support/catch.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

using namespace sova;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("cuda driver: host_map, host_register_on, copies through it, unregister, unmap", "[gpu][cuda_driver]") {
  Driver& d = cuda_driver();
  const std::size_t bytes = 6 * kMiB + 4096;  // not a multiple of 2 MiB: the mapping rounds up
  void* host = nullptr;
  REQUIRE(d.host_map(bytes, &host) == cudaSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(host) % (2 * kMiB) == 0);
  auto* h = static_cast<unsigned char*>(host);
  for (std::size_t i = 0; i < bytes; ++i) h[i] = static_cast<unsigned char>(i * 7 + 1);

  // Registered from a thread that never used CUDA: the driver makes device 0's context current.
  cudaError_t registered = cudaErrorUnknown;
  std::thread([&] { registered = d.host_register_on(0, host, bytes); }).join();
  REQUIRE(registered == cudaSuccess);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, host) == cudaSuccess);
  CHECK(attributes.type == cudaMemoryTypeHost);
  CHECK(d.host_register_on(0, host, bytes) == cudaErrorHostMemoryAlreadyRegistered);
  CHECK(cudaGetLastError() == cudaSuccess);  // the refusal left no error behind

  // Device to host and back through the registered memory, asynchronously.
  void* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, bytes) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(d.memcpy_async(dev, host, bytes, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  std::memset(host, 0, bytes);
  REQUIRE(d.memcpy_async(host, dev, bytes, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += h[i] != static_cast<unsigned char>(i * 7 + 1);
  CHECK(wrong == 0);

  CHECK(d.host_unregister(host) == cudaSuccess);
  CHECK(d.host_unregister(host) == cudaErrorHostMemoryNotRegistered);
  CHECK(d.host_unmap(host, bytes) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaFree(dev) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaSuccess);
}
