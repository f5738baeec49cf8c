// Kernels the GPU test programs share: write a 32-bit tag into device memory,
// count the words that do not hold it, keep a stream busy. The gpu suite's
// TestDevice (cuda_test_device.cu) and the multigpu suite's helpers
// (test/multigpu/multigpu_util.cu) launch them. No Catch2 here: nvcc
// compiles this header's users.
//
// Each function enqueues one kernel on `stream`, whose device must be current
// (a kernel runs on the current device), and aborts, naming the kernel, when
// the launch itself fails. The launch goes through cudaLaunchKernelEx, whose
// result is this launch's own: not a <<<>>> launch followed by
// cudaGetLastError, which reads the thread's last error, left behind by any
// earlier runtime call that failed (tests provoke refusals on purpose) until
// it is read, and would blame this launch for it.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sova::test {

/// Writes `tag` into every 32-bit word of [ptr, ptr + bytes).
void launch_fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream);

/// Adds to `*wrong` (device memory, readable by the stream's device) the
/// number of 32-bit words of [ptr, ptr + bytes) that are not `tag`.
void launch_count_wrong(const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                        cudaStream_t stream);

/// Keeps `stream` busy for about `duration` of GPU time (one thread: the
/// point is to hold the stream, not the GPU).
void launch_busy(cudaStream_t stream, std::chrono::microseconds duration);

}  // namespace sova::test
