// What sova_sleep_wake's modes share: a CUDA error check that ends the run,
// a clock, the process's resident memory, the device's free memory, a pool
// filled with blocks.
#pragma once

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <unistd.h>

namespace sova::sleep_bench {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

#define CHECK_CUDA(call) \
  do { \
    const cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1); \
    } \
  } while (0)

/// The process's resident memory (/proc/self/statm), in bytes; 0 unreadable.
inline std::size_t resident_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

inline std::size_t device_free() {
  std::size_t f = 0, t = 0;
  CHECK_CUDA(cudaMemGetInfo(&f, &t));
  return f;
}

/// `bytes` of `pool` in blocks of `block_bytes` (the last one the rest), the
/// i-th set to byte 1 + i % 250 on `stream`, which is then synchronized.
inline std::vector<void*> fill_blocks(Pool& pool, std::size_t bytes, std::size_t block_bytes, cudaStream_t stream) {
  std::vector<void*> blocks;
  for (std::size_t off = 0; off < bytes; off += block_bytes) {
    const std::size_t n = std::min(block_bytes, bytes - off);
    void* p = pool.allocate(n, stream);
    CHECK_CUDA(cudaMemsetAsync(p, 1 + static_cast<int>(blocks.size() % 250), n, stream));
    blocks.push_back(p);
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return blocks;
}

}  // namespace sova::sleep_bench
