// Helpers of the [scenario] tests (test/gpu/test_scenario_*.cpp and
// test/multigpu/test_scenario_*.cpp): tests written from the documentation
// alone, as a user would use sova. No Catch2 here: nvcc compiles
// scenario_util.cu.
//
// Unlike support/tag_kernels.hpp's one 32-bit tag per block, the pattern here
// differs at every byte (a hash of the tag and the byte's index), so that a
// block restored at the wrong offset, a tail byte not restored, or two blocks
// swapped show up, and blocks of odd sizes (777 B, 96 MiB + 4100 B) are
// checked to their last byte.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sova::scenario {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

/// Writes the pattern of `tag` into every byte of [ptr, ptr + bytes) on
/// `stream`. The kernel runs on `device`, which must be the stream's device:
/// the helper makes it current for the launch and puts the caller's current
/// device back (legal during a capture in any mode). Aborts on a launch failure.
void fill(int device, void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream);

/// Adds to `*wrong` the number of bytes of [ptr, ptr + bytes) that do not hold
/// `tag`'s pattern. `wrong` may be a Counters slot (host memory, any device).
void count_wrong(int device, const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                 cudaStream_t stream);

/// Keeps `stream` (of `device`) busy for about `microseconds` of GPU time.
void busy(int device, cudaStream_t stream, unsigned long long microseconds);

/// Counters in pinned, mapped, portable host memory: every device's kernels
/// add to them (system-scope atomics), the host reads them after a synchronize.
class Counters {
 public:
  explicit Counters(std::size_t count);
  ~Counters();
  Counters(const Counters&) = delete;
  Counters& operator=(const Counters&) = delete;
  unsigned long long* slot(std::size_t i) { return slots_ + i; }
  unsigned long long read(std::size_t i) const;
  unsigned long long sum() const;
  void zero();
  std::size_t size() const { return count_; }

 private:
  unsigned long long* slots_ = nullptr;
  std::size_t count_ = 0;
};

/// The device the runtime says `ptr`'s memory lives on (cudaPointerGetAttributes);
/// -1 when it is not device memory or the query fails (the error is cleared).
int pointer_device(const void* ptr);

/// The device's free memory (cudaMemGetInfo on `device`; current device restored).
std::size_t free_memory(int device);

}  // namespace sova::scenario
