// What sova_sleep_wake's modes share: a CUDA error check that ends the run,
// a clock, the device's free memory.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

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

inline std::size_t device_free() {
  std::size_t f = 0, t = 0;
  CHECK_CUDA(cudaMemGetInfo(&f, &t));
  return f;
}

}  // namespace sova::sleep_bench
