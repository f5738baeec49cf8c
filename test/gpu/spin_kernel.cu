#include "spin_kernel.hpp"

namespace sova::gputest {

namespace {

__device__ unsigned long long global_timer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(unsigned long long nanoseconds) {
  const unsigned long long start = global_timer_ns();
  while (global_timer_ns() - start < nanoseconds) {
  }
}

}  // namespace

cudaError_t launch_spin(cudaStream_t stream, unsigned long long nanoseconds) {
  spin<<<1, 1, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

}  // namespace sova::gputest
