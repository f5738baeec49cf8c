#include "lcg_kernel.hpp"

namespace sova::gputest {

namespace {

__device__ unsigned long long lcg_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void lcg_rounds(std::uint32_t* data, std::size_t words, unsigned rounds, unsigned long long ns_per_round) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (unsigned r = 0; r < rounds; ++r) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words; i += stride) {
      data[i] = data[i] * 1664525u + 1013904223u;
    }
    const unsigned long long start = lcg_timer_ns();
    while (lcg_timer_ns() - start < ns_per_round) {
    }
  }
}

}  // namespace

cudaError_t launch_lcg_rounds(std::uint32_t* data, std::size_t words, unsigned rounds, unsigned long long ns_per_round,
                              cudaStream_t stream) {
  lcg_rounds<<<128, 256, 0, stream>>>(data, words, rounds, ns_per_round);
  return cudaGetLastError();
}

}  // namespace sova::gputest
