// Probe: does cudaStreamCreate hand out the handle of a stream destroyed
// while its work still runs? (sova's check_streams guards against it.)
#include <cuda_runtime.h>

#include <cstdio>

__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

int main() {
  int reused_busy = 0, reused_idle = 0;
  for (int i = 0; i < 20; ++i) {
    cudaStream_t a, b;
    cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
    spin<<<1, 1, 0, a>>>(20'000'000ull);  // 20 ms
    cudaStreamDestroy(a);
    cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
    if (a == b) ++reused_busy;
    cudaDeviceSynchronize();
    cudaStreamDestroy(b);
    cudaStream_t c, d;
    cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking);
    cudaStreamDestroy(c);
    cudaStreamCreateWithFlags(&d, cudaStreamNonBlocking);
    if (c == d) ++reused_idle;
    cudaStreamDestroy(d);
  }
  std::printf("handle of a stream destroyed while busy reused by the next create: %d / 20\n", reused_busy);
  std::printf("handle of an idle destroyed stream reused by the next create:      %d / 20\n", reused_idle);
  return 0;
}
