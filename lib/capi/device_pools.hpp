// sova C API — per-device default and current pools.
//
// default: created lazily on first use (pool_lifetime.cpp), props = that
//   device and defaults; lives as long as the process (never destroyed, not
//   even at exit: the driver it uses may be gone by then).
// current: what sovaMallocAsync on that device allocates from; the default
//   pool until sovaDeviceSetMemPool names another, and the default again when
//   that other pool is destroyed.
#pragma once

#include "capi/pool_entry.hpp"

#include <array>
#include <atomic>

namespace sova::capi {

class DevicePools {
 public:
  /// Devices beyond this are refused with cudaErrorNotSupported (the tables
  /// are fixed so that the fast path indexes them without a lock).
  static constexpr int kMaxDevices = 64;

  static bool in_table(int device) noexcept {
    return static_cast<unsigned>(device) < static_cast<unsigned>(kMaxDevices);
  }

  /// The device's current pool, or nullptr before its default pool exists
  /// (or for a device outside the table). Lock-free; inside a ReadSection.
  PoolEntry* current(int device) const noexcept {
    return in_table(device) ? current_[device].load(std::memory_order_acquire) : nullptr;
  }
  /// The device's default pool, or nullptr before it exists. Lock-free.
  PoolEntry* default_pool(int device) const noexcept {
    return in_table(device) ? default_[device].load(std::memory_order_acquire) : nullptr;
  }

  /// Installs a new default pool; it becomes current unless a pool was set
  /// current before the default existed. Lifetime mutex held.
  void set_default(int device, PoolEntry* e) noexcept {
    default_[device].store(e, std::memory_order_release);
    if (current_[device].load(std::memory_order_relaxed) == nullptr)
      current_[device].store(e, std::memory_order_release);
  }
  /// Lifetime mutex held; `e` is live and of `device`.
  void set_current(int device, PoolEntry* e) noexcept { current_[device].store(e, std::memory_order_release); }
  /// If `e` is its device's current pool, the default pool takes over (or,
  /// if none exists yet, it will be created and made current on next use).
  /// Lifetime mutex held (so no set_current can slip in a destroyed pool).
  void revert_current(const PoolEntry* e) noexcept {
    if (current_[e->device].load(std::memory_order_relaxed) == e)
      current_[e->device].store(default_[e->device].load(std::memory_order_relaxed), std::memory_order_release);
  }

 private:
  std::array<std::atomic<PoolEntry*>, kMaxDevices> current_{};
  std::array<std::atomic<PoolEntry*>, kMaxDevices> default_{};
};

}  // namespace sova::capi
