// multistream/ kernel (see multistream.hpp). Built only when meson's gpu_enabled.
#include "multistream_kernel.hpp"

namespace sova_bench {
namespace {

constexpr unsigned kBlocks = 8;  // small: the four streams' kernels run side by side
constexpr unsigned kThreads = 128;
constexpr std::size_t kStrideWords = kTouchStride / sizeof(unsigned);

struct KernelArgs {
  unsigned* temps[kMsTemps];
  unsigned long long words[kMsTemps];  // words in each temporary
  int count;
  unsigned tag;
  unsigned long long nanoseconds;
  unsigned long long* errors;
};

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// What the kernel writes at word i of temporary k: differs by tag (loop,
// round, stream), temporary and offset.
__device__ unsigned tag_value(unsigned tag, int k, unsigned long long i) {
  return tag * 2654435761u ^ static_cast<unsigned>(k) * 40503u ^ static_cast<unsigned>(i);
}

// Writes a tag into one word every kTouchStride bytes of each temporary, waits
// until `nanoseconds` have passed, then reads every tag back: another stream's
// kernel writing the same memory meanwhile (premature reuse) shows as a
// mismatch. The volatile reads go to memory, not to a register copy.
__global__ void multistream_kernel(KernelArgs args) {
  const unsigned long long start = global_ns();
  const unsigned long long first = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
  const unsigned long long step = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (int k = 0; k < args.count; ++k) {
    for (unsigned long long w = first; w * kStrideWords < args.words[k]; w += step) {
      args.temps[k][w * kStrideWords] = tag_value(args.tag, k, w);
    }
  }
  while (global_ns() - start < args.nanoseconds) __nanosleep(1000);
  unsigned long long bad = 0;
  for (int k = 0; k < args.count; ++k) {
    const volatile unsigned* p = args.temps[k];
    for (unsigned long long w = first; w * kStrideWords < args.words[k]; w += step) {
      bad += p[w * kStrideWords] != tag_value(args.tag, k, w);
    }
  }
  if (bad != 0) atomicAdd(args.errors, bad);
}

}  // namespace

void launch_multistream_kernel(cudaStream_t stream, void* const* temps, const std::size_t* bytes, int count,
                               std::uint32_t tag, std::uint64_t nanoseconds, unsigned long long* device_errors) {
  KernelArgs args{};
  args.count = count < kMsTemps ? count : kMsTemps;
  for (int k = 0; k < args.count; ++k) {
    args.temps[k] = static_cast<unsigned*>(temps[k]);
    args.words[k] = bytes[k] / sizeof(unsigned);
  }
  args.tag = tag;
  args.nanoseconds = nanoseconds;
  args.errors = device_errors;
  multistream_kernel<<<kBlocks, kThreads, 0, stream>>>(args);
}

}  // namespace sova_bench
