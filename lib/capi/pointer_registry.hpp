// sova C API — finds the pool that owns a pointer, for sovaFreeAsync.
//
// Every pool that still holds memory is listed: live pools and destroyed pools
// waiting for their last block (pool_lifetime.hpp). The list is a fixed array
// with holes, scanned up to a high-water mark, so a reader never misses an
// entry that stays listed while it scans (entries are never moved). Most
// processes have one or a few pools, so the scan is a few Pool::contains
// calls, and find_for_free() skips the last one.
#pragma once

#include "capi/pool_entry.hpp"

#include <array>
#include <atomic>
#include <cstdint>

namespace sova::capi {

class PointerRegistry {
 public:
  static constexpr std::uint32_t kMaxOwners = 16384;

  /// The listed pool whose VA range holds `ptr`, or nullptr. Lock-free; call
  /// inside a ReadSection. A pool added concurrently may be missed, which is
  /// harmless: its blocks cannot have been handed out before it was added.
  PoolEntry* find(const void* ptr) const noexcept {
    const std::uint32_t n = limit_.load(std::memory_order_acquire);
    for (std::uint32_t i = 0; i < n; ++i) {
      PoolEntry* e = owners_[i].load(std::memory_order_acquire);
      if (e != nullptr && e->pool.contains(ptr)) return e;
    }
    return nullptr;
  }

  /// As find(), but the last listed pool is returned without asking it:
  /// when `ptr` is not in any other, it is that pool's or nobody's, and
  /// Pool::try_deallocate tells which (cudaErrorInvalidValue for a pointer
  /// outside its range). Saves the common case of one pool a Pool::contains
  /// call (~1-2 ns). nullptr only when no pool is listed.
  PoolEntry* find_for_free(const void* ptr) const noexcept {
    std::uint32_t n = limit_.load(std::memory_order_acquire);
    PoolEntry* last = nullptr;
    while (n > 0 && (last = owners_[n - 1].load(std::memory_order_acquire)) == nullptr) --n;
    for (std::uint32_t i = 0; i + 1 < n; ++i) {
      PoolEntry* e = owners_[i].load(std::memory_order_acquire);
      if (e != nullptr && e->pool.contains(ptr)) return e;
    }
    return last;
  }

  /// Calls f(e) for each listed pool. Lifetime mutex held (no entry is then
  /// unlisted or deleted meanwhile).
  template <class F>
  void for_each_locked(F f) const {
    const std::uint32_t n = limit_.load(std::memory_order_relaxed);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (PoolEntry* e = owners_[i].load(std::memory_order_relaxed)) f(e);
    }
  }
  /// Lists `e`. Lifetime mutex held. False (nothing changed) when full.
  bool add(PoolEntry* e) noexcept;
  /// Unlists `e`. Lifetime mutex held. Readers may still hold `e` until the
  /// caller's synchronize_readers() returns.
  void remove(PoolEntry* e) noexcept;

 private:
  std::array<std::atomic<PoolEntry*>, kMaxOwners> owners_{};
  std::atomic<std::uint32_t> limit_{0};  ///< slots at and above are empty
};

}  // namespace sova::capi
