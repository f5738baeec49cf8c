#include "support/tag_kernels.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace sova::test {

namespace {

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

__global__ void busy_kernel(unsigned long long nanoseconds) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < nanoseconds) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

template <typename... Params, typename... Args>
void launch(const char* what, void (*kernel)(Params...), unsigned blocks, unsigned threads, cudaStream_t stream,
            Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.stream = stream;
  const cudaError_t error = cudaLaunchKernelEx(&config, kernel, args...);
  if (error != cudaSuccess) {
    std::fprintf(stderr, "test kernels: %s launch failed: %s\n", what, cudaGetErrorString(error));
    std::abort();
  }
}

unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

}  // namespace

void launch_fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) {
  const std::size_t count = bytes / 4;
  launch("fill_kernel", fill_kernel, blocks_for(count), 256, stream, static_cast<std::uint32_t*>(ptr), count, tag);
}

void launch_count_wrong(const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                        cudaStream_t stream) {
  const std::size_t count = bytes / 4;
  launch("count_wrong_kernel", count_wrong_kernel, blocks_for(count), 256, stream,
         static_cast<const std::uint32_t*>(ptr), count, tag, wrong);
}

void launch_busy(cudaStream_t stream, std::chrono::microseconds duration) {
  launch("busy_kernel", busy_kernel, 1, 1, stream, static_cast<unsigned long long>(duration.count()) * 1000ull);
}

}  // namespace sova::test
