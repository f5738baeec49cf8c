// The multigpu suite's helpers: devices, streams on a given device, and
// writing and checking tags in memory of any device the stream's device may
// access (support/tag_kernels.hpp's kernels, launched on the stream's
// device). No Catch2 here: nvcc compiles it (multigpu_util.cu); the test
// cases' device check is in require_devices.hpp.
#pragma once

#include "support/access_desc.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sova::multigpu {

inline constexpr std::size_t kMiB = std::size_t{1} << 20;
inline constexpr std::size_t kGiB = std::size_t{1} << 30;

/// CUDA's device count (0 when there is no driver or device).
int device_count();

/// Makes `device` current on this thread for the scope, then restores the previous one.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

/// A non-blocking stream of `device`, synchronized and destroyed at scope exit.
class DeviceStream {
 public:
  explicit DeviceStream(int device);
  ~DeviceStream();
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  operator cudaStream_t() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

/// Writes `tag` into every 32-bit word of [ptr, ptr + bytes) on `stream`
/// (the kernel runs on the stream's device).
void fill(void* ptr, std::size_t bytes, std::uint32_t tag, const DeviceStream& stream);
/// Counts on `stream`'s device the words of [ptr, ptr + bytes) that are not
/// `tag`; synchronizes the stream and returns the count.
std::uint64_t count_wrong(const void* ptr, std::size_t bytes, std::uint32_t tag, const DeviceStream& stream);
/// As count_wrong, without waiting: the count lands in `*wrong` (device
/// memory of the stream's device, zeroed by the caller) when the stream gets there.
void count_wrong_async(const void* ptr, std::size_t bytes, std::uint32_t tag, unsigned long long* wrong,
                       const DeviceStream& stream);
/// Keeps `stream` busy for about `duration` of GPU time.
void spin(const DeviceStream& stream, std::chrono::microseconds duration);

using test::access_desc;

/// The device a pointer's memory lives on, as the runtime reports it (-1: not device memory).
int pointer_device(const void* ptr);

/// What the driver says `device` may do at `ptr` (cuMemGetAccess): the
/// mapping's real protection, whatever the pool's own bookkeeping says.
cudaMemAccessFlags mapped_access(const void* ptr, int device);

/// The device's free memory (cudaMemGetInfo).
std::size_t free_memory(int device);

}  // namespace sova::multigpu
