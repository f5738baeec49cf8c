#include "gpu/scenario_util.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sova::scenario {

namespace {

__host__ __device__ inline std::uint32_t mix(std::uint32_t tag, std::uint64_t word) {
  std::uint32_t h = tag * 0x9E3779B1u ^ static_cast<std::uint32_t>(word) ^ static_cast<std::uint32_t>(word >> 32) * 0x85EBCA6Bu;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  h *= 0x297A2D39u;
  h ^= h >> 15;
  return h;
}

__device__ inline std::uint8_t pattern_byte(std::uint32_t tag, std::uint64_t i) {
  return static_cast<std::uint8_t>(mix(tag, i >> 2) >> (8 * (i & 3)));
}

// Pointers from sova are 512-byte aligned; the words are aligned, the tail is
// written byte by byte.
__global__ void fill_kernel(std::uint8_t* p, std::size_t bytes, std::uint32_t tag) {
  const std::size_t words = bytes / 4;
  auto* w = reinterpret_cast<std::uint32_t*>(p);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = first; i < words; i += stride) w[i] = mix(tag, i);
  if (first == 0)
    for (std::size_t i = words * 4; i < bytes; ++i) p[i] = pattern_byte(tag, i);
}

__global__ void count_kernel(const std::uint8_t* p, std::size_t bytes, std::uint32_t tag,
                             unsigned long long* wrong) {
  const std::size_t words = bytes / 4;
  const auto* w = reinterpret_cast<const std::uint32_t*>(p);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned long long mine = 0;
  for (std::size_t i = first; i < words; i += stride) {
    const std::uint32_t have = w[i];
    const std::uint32_t want = mix(tag, i);
    if (have != want)
      for (int b = 0; b < 4; ++b) mine += ((have >> (8 * b)) & 0xFFu) != ((want >> (8 * b)) & 0xFFu);
  }
  if (first == 0)
    for (std::size_t i = words * 4; i < bytes; ++i) mine += p[i] != pattern_byte(tag, i);
  if (mine != 0) atomicAdd_system(wrong, mine);
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

void die(const char* what, cudaError_t e) {
  std::fprintf(stderr, "scenario_util: %s failed: %s\n", what, cudaGetErrorString(e));
  std::abort();
}

class OnDevice {
 public:
  explicit OnDevice(int device) {
    cudaError_t e = cudaGetDevice(&saved_);
    if (e != cudaSuccess) die("cudaGetDevice", e);
    if (saved_ != device && (e = cudaSetDevice(device)) != cudaSuccess) die("cudaSetDevice", e);
    device_ = device;
  }
  ~OnDevice() {
    if (saved_ != device_) cudaSetDevice(saved_);
  }

 private:
  int saved_ = 0;
  int device_ = 0;
};

template <typename... Params, typename... Args>
void launch(const char* what, void (*kernel)(Params...), std::size_t work, unsigned threads, cudaStream_t stream,
            Args... args) {
  std::size_t blocks = (work + threads - 1) / threads;
  if (blocks == 0) blocks = 1;
  if (blocks > 4096) blocks = 4096;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(threads);
  config.stream = stream;
  const cudaError_t e = cudaLaunchKernelEx(&config, kernel, args...);
  if (e != cudaSuccess) die(what, e);
}

}  // namespace

void fill(int device, void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) {
  if (bytes == 0) return;
  OnDevice on(device);
  launch("scenario fill", fill_kernel, bytes / 4, 256, stream, static_cast<std::uint8_t*>(ptr), bytes, tag);
}

void count_wrong(int device, const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                 cudaStream_t stream) {
  if (bytes == 0) return;
  OnDevice on(device);
  launch("scenario count_wrong", count_kernel, bytes / 4, 256, stream, static_cast<const std::uint8_t*>(ptr), bytes,
         tag, wrong);
}

void busy(int device, cudaStream_t stream, unsigned long long microseconds) {
  OnDevice on(device);
  launch("scenario busy", busy_kernel, 1, 1, stream, microseconds * 1000ull);
}

Counters::Counters(std::size_t count) : count_(count) {
  void* p = nullptr;
  const cudaError_t e =
      cudaHostAlloc(&p, count * sizeof(unsigned long long), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) die("cudaHostAlloc (counters)", e);
  slots_ = static_cast<unsigned long long*>(p);
  zero();
}

Counters::~Counters() { cudaFreeHost(slots_); }

unsigned long long Counters::read(std::size_t i) const {
  return *const_cast<volatile unsigned long long*>(slots_ + i);
}

unsigned long long Counters::sum() const {
  unsigned long long s = 0;
  for (std::size_t i = 0; i < count_; ++i) s += read(i);
  return s;
}

void Counters::zero() { std::memset(slots_, 0, count_ * sizeof(unsigned long long)); }

int pointer_device(const void* ptr) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, ptr) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

std::size_t free_memory(int device) {
  OnDevice on(device);
  std::size_t free = 0, total = 0;
  const cudaError_t e = cudaMemGetInfo(&free, &total);
  if (e != cudaSuccess) die("cudaMemGetInfo", e);
  return free;
}

}  // namespace sova::scenario
