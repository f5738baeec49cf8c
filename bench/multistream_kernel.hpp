// multistream/ — what the kernel (multistream_gpu.cu) and the C++ side share.
// Kept apart from multistream.hpp so that nvcc never sees Google Benchmark.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sova_bench {

inline constexpr int kMsTemps = 2;  // temporaries per kernel
/// The kernel touches one 32-bit word every kTouchStride bytes of each temporary.
inline constexpr std::size_t kTouchStride = 512;

#if defined(SOVA_BENCH_KERNELS)
/// Launches the tag-write / wait / tag-check kernel on `stream` over `count`
/// (at most kMsTemps) temporaries; tags read back wrong are added to
/// `device_errors`. Launch errors are left to cudaGetLastError.
void launch_multistream_kernel(cudaStream_t stream, void* const* temps, const std::size_t* bytes, int count,
                               std::uint32_t tag, std::uint64_t nanoseconds, unsigned long long* device_errors);
#endif

}  // namespace sova_bench
