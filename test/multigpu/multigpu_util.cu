#include "multigpu/multigpu_util.hpp"

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

__global__ void fill_kernel(std::uint32_t* words, std::size_t count, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) words[i] = tag;
}

__global__ void count_wrong_kernel(const std::uint32_t* words, std::size_t count, std::uint32_t tag,
                                   unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x)
    mine += words[i] != tag;
  if (mine != 0) atomicAdd(wrong, mine);
}

__global__ void spin_kernel(unsigned long long nanoseconds) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < nanoseconds) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

// Launches `kernel` and aborts, naming `what`, when the launch itself
// fails. Not a <<<>>> launch followed by cudaGetLastError: that reads the thread's last error,
// which any earlier runtime call that failed leaves behind until it is read
// (the tests provoke refusals on purpose, e.g. cudaMemPoolSetAccess with an
// invalid device), and would blame this launch for it.
template <typename... Params, typename... Args>
void launch(const char* what, void (*kernel)(Params...), unsigned blocks, unsigned threads, cudaStream_t stream,
            Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  check(cudaLaunchKernelEx(&config, kernel, args...), what);
}

unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
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
  const std::size_t count = bytes / 4;
  launch("fill_kernel launch", fill_kernel, blocks_for(count), 256, stream, static_cast<std::uint32_t*>(ptr), count,
         tag);
}

void count_wrong_async(const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                       const DeviceStream& stream) {
  CurrentDevice current(stream.device());
  const std::size_t count = bytes / 4;
  launch("count_wrong_kernel launch", count_wrong_kernel, blocks_for(count), 256, stream,
         static_cast<const std::uint32_t*>(ptr), count, tag, wrong);
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
  launch("spin_kernel launch", spin_kernel, 1, 1, stream, static_cast<unsigned long long>(duration.count()) * 1000ull);
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
