// sova seed loop on a GPU (see seed.hpp). Built only when meson's gpu_enabled.
#include "seed.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace sova_bench {
namespace {

constexpr unsigned kThreads = 256;
// One float per thread: a block of whole MiB is a whole number of CUDA blocks.
static_assert((std::size_t{1} << 20) % (kThreads * sizeof(float)) == 0, "one float per thread");

// What the kernel writes at index i in iteration `tag`, and what it leaves
// there after the read-modify step. Exact in float at any block size: tag <=
// 100 < 2^7 and i & 0xffff < 2^16, so every value stays below 2^24.
__host__ __device__ float seed_written(float tag, std::size_t i) {
  return tag * 65536.0f + static_cast<float>(i & 0xffff);
}
__host__ __device__ float seed_final(float tag, std::size_t i) { return seed_written(tag, i) * 2.0f + 1.0f; }

// Writes every float, reads it back and checks it, then modifies it: the
// allocation is really touched, and memory that is not what it should be
// (unmapped, shared with something else) shows as a fault or a counted error.
// The volatile accesses keep the compiler from folding the read into the write.
__global__ void seed_kernel(float* p, float tag, unsigned long long* errors) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  volatile float* v = p;
  const float want = seed_written(tag, i);
  v[i] = want;
  const float got = v[i];
  if (got != want) atomicAdd(errors, 1ULL);
  p[i] = got * 2.0f + 1.0f;
}

}  // namespace

GpuSeed::GpuSeed(std::size_t mib) {
  set_block_mib(mib);
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, sizeof(unsigned long long)), "cudaMalloc(error counter)");
  errors_ = static_cast<unsigned long long*>(p);
  check_cuda(cudaMemsetAsync(errors_, 0, sizeof(unsigned long long), stream_.get()), "cudaMemsetAsync");
  stream_.sync();
}

GpuSeed::~GpuSeed() {
  cudaStreamSynchronize(stream_.get());
  cudaFree(errors_);
  cudaFree(prealloc_);
}

void GpuSeed::set_block_mib(std::size_t mib) {
  const std::size_t bytes = seed_block_bytes(mib);
  if (bytes > prealloc_bytes_) {
    stream_.sync();
    check_cuda(cudaFree(prealloc_), "cudaFree(preallocated)");
    prealloc_ = nullptr;
    prealloc_bytes_ = 0;
    void* p = nullptr;
    check_cuda(cudaMalloc(&p, bytes), "cudaMalloc(preallocated)");
    prealloc_ = static_cast<float*>(p);
    prealloc_bytes_ = bytes;
  }
  bytes_ = bytes;
}

float* GpuSeed::acquire(SeedVariant v) {
  void* p = nullptr;
  switch (v) {
    case SeedVariant::cuda_malloc: check_cuda(cudaMalloc(&p, bytes_), "cudaMalloc"); break;
    case SeedVariant::cuda_malloc_async:
      check_cuda(cudaMallocAsync(&p, bytes_, stream_.get()), "cudaMallocAsync");
      break;
    case SeedVariant::sova: check_cuda(sovaMallocAsync(&p, bytes_, stream_.get()), "sovaMallocAsync"); break;
    case SeedVariant::preallocated: p = prealloc_; break;
  }
  return static_cast<float*>(p);
}

void GpuSeed::release(SeedVariant v, float* p) {
  switch (v) {
    case SeedVariant::cuda_malloc: check_cuda(cudaFree(p), "cudaFree"); break;
    case SeedVariant::cuda_malloc_async: check_cuda(cudaFreeAsync(p, stream_.get()), "cudaFreeAsync"); break;
    case SeedVariant::sova: check_cuda(sovaFreeAsync(p, stream_.get()), "sovaFreeAsync"); break;
    case SeedVariant::preallocated: break;
  }
}

void GpuSeed::launch(float* p, int tag) {
  const auto blocks = static_cast<unsigned>(bytes_ / sizeof(float) / kThreads);
  seed_kernel<<<blocks, kThreads, 0, stream_.get()>>>(p, static_cast<float>(tag), errors_);
}

double GpuSeed::run(SeedVariant v) {
  set_seed_thresholds(threshold_, true);
  stream_.sync();
  const Clock::time_point start = Clock::now();
  for (int it = 0; it < kSeedIterations; ++it) {
    float* p = acquire(v);
    launch(p, it);
    release(v, p);
  }
  const cudaError_t err = cudaStreamSynchronize(stream_.get());
  const double elapsed = seconds_since(start);
  check_cuda(err, "cudaStreamSynchronize");
  check_cuda(cudaGetLastError(), "seed kernel launch");
  return elapsed;
}

void GpuSeed::verify(SeedVariant v) {
  const int tag = kSeedIterations;  // a tag no timed iteration writes
  std::vector<float> host(bytes_ / sizeof(float));
  float* p = acquire(v);
  launch(p, tag);
  check_cuda(cudaMemcpyAsync(host.data(), p, bytes_, cudaMemcpyDeviceToHost, stream_.get()), "cudaMemcpyAsync");
  release(v, p);
  stream_.sync();
  check_cuda(cudaGetLastError(), "seed kernel launch");
  for (std::size_t i = 0; i < host.size(); ++i) {
    const float want = seed_final(static_cast<float>(tag), i);
    if (host[i] != want) {
      char msg[200];
      std::snprintf(msg, sizeof msg, "%s, %zu MiB: kernel result wrong at float %zu: %.1f, want %.1f",
                    seed_variant_name(v), bytes_ >> 20, i, static_cast<double>(host[i]), static_cast<double>(want));
      throw std::runtime_error(msg);
    }
  }
}

std::uint64_t GpuSeed::kernel_errors() {
  unsigned long long count = 0;
  check_cuda(cudaMemcpyAsync(&count, errors_, sizeof count, cudaMemcpyDeviceToHost, stream_.get()),
             "cudaMemcpyAsync(error counter)");
  stream_.sync();
  return count;
}

}  // namespace sova_bench
