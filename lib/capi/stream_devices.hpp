// StreamDevices: which device a stream handle names, for cudaMallocAsync's
// choice of pool (the stream's device's current pool) on a system of several
// devices, without a driver call per allocation.
//
// The driver's answer (Driver::stream_device) costs calls, so each handle's
// device is asked once and cached process-wide. A handle comes back as a
// stream of another device once its stream is destroyed (20 times of 20 on
// the H200s: tools/probe_capture_queries): the pool the cache chose finds
// that out itself (outside capture its stream checks see the new stream's id
// and ask the device again; under capture it asks at each allocation:
// Pool::stream_device), and sovaMallocAsync then moves the allocation to the
// right pool and corrects the cache (capi_alloc.cpp).
//
// Thread safety: lock-free; a slot is one atomic word, so a reader sees a
// whole entry or none. Entries are only ever the driver's answers.
#pragma once

#include "base/implicit_stream.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace sova::capi {

class StreamDevices {
 public:
  /// The device cached for `stream`, or -1. One relaxed load.
  int lookup(cudaStream_t stream) const noexcept {
    const std::uint64_t handle = bits(stream);
    const std::uint64_t entry = slots_[slot(handle)].load(std::memory_order_relaxed);
    if (entry == 0 || (entry >> kDeviceBits) != handle) return -1;
    return static_cast<int>(entry & kDeviceMask) - 1;
  }
  /// Caches `device` for `stream` (replacing whatever shared its slot).
  /// Handles or devices too large to pack are not cached.
  void remember(cudaStream_t stream, int device) noexcept {
    const std::uint64_t handle = bits(stream);
    if (device < 0 || static_cast<std::uint64_t>(device) + 1 > kDeviceMask || handle >> (64 - kDeviceBits) != 0) {
      return;
    }
    slots_[slot(handle)].store((handle << kDeviceBits) | static_cast<std::uint64_t>(device + 1),
                               std::memory_order_relaxed);
  }

 private:
  static constexpr unsigned kDeviceBits = 8;
  static constexpr std::uint64_t kDeviceMask = (std::uint64_t{1} << kDeviceBits) - 1;
  static constexpr std::size_t kSlots = 1024;

  static std::uint64_t bits(cudaStream_t stream) noexcept { return reinterpret_cast<std::uintptr_t>(stream); }
  static std::size_t slot(std::uint64_t handle) noexcept {
    const std::uint64_t h = handle >> 3;  // handles are aligned to 8 at least
    return static_cast<std::size_t>((h ^ (h >> 10) ^ (h >> 20)) & (kSlots - 1));
  }

  std::array<std::atomic<std::uint64_t>, kSlots> slots_{};
};

using sova::detail::is_implicit_stream;

/// The process's cache: constant-initialized and trivially destructible, so
/// usable from any static constructor or destructor.
extern StreamDevices g_stream_devices;

/// A stream not in the cache: asked of the driver where it may be (out of line).
cudaError_t ask_stream_device(Driver& driver, cudaStream_t stream, int* device) noexcept;

/// The device whose current pool cudaMallocAsync on `stream` allocates from:
/// for the implicit handles the current device; else the cached answer, or
/// the driver's, then cached. The driver's error for an invalid handle.
inline cudaError_t stream_device_of(Driver& driver, cudaStream_t stream, int* device) noexcept {
  if (is_implicit_stream(stream)) return driver.current_device(device);
  if (const int cached = g_stream_devices.lookup(stream); cached >= 0) [[likely]] {
    *device = cached;
    return cudaSuccess;
  }
  return ask_stream_device(driver, stream, device);
}

}  // namespace sova::capi
