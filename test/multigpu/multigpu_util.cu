#include "multigpu/multigpu_util.hpp"

#include "support/tag_kernels.hpp"

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace sova::multigpu {

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "multigpu: %s failed: %s\n", what, cudaGetErrorString(error));
    std::abort();
  }
}

}  // namespace

int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

CurrentDevice::CurrentDevice(int device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  check(cudaSetDevice(device), "cudaSetDevice");
}
CurrentDevice::~CurrentDevice() { cudaSetDevice(previous_); }

DeviceStream::DeviceStream(int device) : device_(device) {
  CurrentDevice current(device);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}
DeviceStream::~DeviceStream() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}
void DeviceStream::synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

void fill(void* ptr, std::size_t bytes, std::uint32_t tag, const DeviceStream& stream) {
  CurrentDevice current(stream.device());
  test::launch_fill(ptr, bytes, tag, stream);
}

void count_wrong_async(const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                       const DeviceStream& stream) {
  CurrentDevice current(stream.device());
  test::launch_count_wrong(ptr, bytes, tag, wrong, stream);
}

std::uint64_t count_wrong(const void* ptr, std::size_t bytes, std::uint32_t tag, const DeviceStream& stream) {
  CurrentDevice current(stream.device());
  unsigned long long* wrong = nullptr;
  check(cudaMalloc(&wrong, sizeof *wrong), "cudaMalloc");
  check(cudaMemsetAsync(wrong, 0, sizeof *wrong, stream), "cudaMemsetAsync");
  count_wrong_async(ptr, bytes, tag, wrong, stream);
  unsigned long long host = 0;
  check(cudaMemcpyAsync(&host, wrong, sizeof host, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  stream.synchronize();
  check(cudaFree(wrong), "cudaFree");
  return host;
}

void spin(const DeviceStream& stream, std::chrono::microseconds duration) {
  CurrentDevice current(stream.device());
  test::launch_busy(stream, duration);
}

int pointer_device(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) return -1;
  return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

cudaMemAccessFlags mapped_access(const void* ptr, int device) {
  // Through the runtime's entry point rather than linking libcuda: the
  // binary then starts (and fails its device check) on a machine without a driver.
  using GetAccess = CUresult (*)(unsigned long long*, const CUmemLocation*, CUdeviceptr);
  static const GetAccess cu_mem_get_access = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuMemGetAccess", &fn, 12000, cudaEnableDefault, &found),
          "cudaGetDriverEntryPointByVersion");
    if (found != cudaDriverEntryPointSuccess) {
      std::fprintf(stderr, "multigpu: the driver has no cuMemGetAccess\n");
      std::abort();
    }
    return reinterpret_cast<GetAccess>(fn);
  }();
  CUmemLocation location{};
  location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  location.id = device;
  unsigned long long flags = 0;
  const CUresult r = cu_mem_get_access(&flags, &location, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "multigpu: cuMemGetAccess(%p, device %d) failed: %d\n", ptr, device, static_cast<int>(r));
    std::abort();
  }
  return static_cast<cudaMemAccessFlags>(flags);
}

std::size_t free_memory(int device) {
  CurrentDevice current(device);
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return free;
}

}  // namespace sova::multigpu
