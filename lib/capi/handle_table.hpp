// sova C API — pool handles: sovaMemPool_t values that can be validated
// without undefined behaviour, whatever the caller passes.
//
// A handle is not a pointer. Its value encodes a slot of a fixed table and a
// process-wide generation:
//
//     bits 63..18  generation (>= 1, one per pool ever created)
//     bits 17..4   slot index (kSlots = 16384 slots)
//     bits  3..0   tag 0b0101 (real pointers are rarely odd: cheap first reject)
//
// lookup() decodes the slot, loads its entry and accepts the handle only if
// the entry's own handle equals it. NULL, garbage and destroyed handles
// (retired slots, or slots reused by a later pool with a newer generation)
// fail that test; nothing is ever dereferenced but the bounded table.
#pragma once

#include "capi/pool_entry.hpp"

#include <sova/sova.h>

#include <array>
#include <atomic>
#include <cstdint>

namespace sova::capi {

class HandleTable {
 public:
  static constexpr unsigned kSlotBits = 14;
  static constexpr std::uint32_t kSlots = std::uint32_t{1} << kSlotBits;
  static constexpr unsigned kTagBits = 4;
  static constexpr std::uintptr_t kTag = 0b0101;

  /// Entry for `handle`, or nullptr if it names no live pool. Lock-free; call
  /// inside a ReadSection (or with the lifetime mutex held) and use the entry
  /// only until the section ends.
  PoolEntry* lookup(sovaMemPool_t handle) const noexcept {
    const auto h = reinterpret_cast<std::uintptr_t>(handle);
    if ((h & ((std::uintptr_t{1} << kTagBits) - 1)) != kTag) return nullptr;
    PoolEntry* e = slots_[(h >> kTagBits) & (kSlots - 1)].load(std::memory_order_acquire);
    // e->handle is written once, before the release store that published e,
    // and never changed: a retired entry simply leaves its slot.
    return (e != nullptr && e->handle == h) ? e : nullptr;
  }

  /// Whether `handle` has this table's form and a generation already handed
  /// out: a handle of a pool created earlier, so one that lookup() refuses
  /// was destroyed (or its slot reused since). False for NULL and for any
  /// value this table never made. Lock-free, so callable with or without the
  /// lifetime mutex (a refusal under it says why too). For error messages
  /// (pool_handle_refusal.hpp), never for deciding: a pool created meanwhile
  /// may or may not count.
  bool issued(sovaMemPool_t handle) const noexcept {
    const auto h = reinterpret_cast<std::uintptr_t>(handle);
    if ((h & ((std::uintptr_t{1} << kTagBits) - 1)) != kTag) return false;
    const std::uint64_t generation = h >> (kSlotBits + kTagBits);
    const std::uint32_t slot = static_cast<std::uint32_t>((h >> kTagBits) & (kSlots - 1));
    return generation >= 1 && generation < next_generation_.load(std::memory_order_relaxed) &&
           slot < next_unused_.load(std::memory_order_relaxed);
  }

  /// Gives `e` a slot and a fresh handle. Lifetime mutex held. Returns false
  /// (and changes nothing) when every slot is taken.
  bool publish(PoolEntry* e) noexcept;
  /// Clears `e`'s slot; its handle stops validating at once. Lifetime mutex held.
  void retire(PoolEntry* e) noexcept;

  static sovaMemPool_t to_handle(const PoolEntry* e) noexcept { return reinterpret_cast<sovaMemPool_t>(e->handle); }

 private:
  std::array<std::atomic<PoolEntry*>, kSlots> slots_{};
  // Slow-path bookkeeping, all changed under the lifetime mutex; the two
  // counters atomic only so that issued() may read them without it.
  std::atomic<std::uint64_t> next_generation_{1};
  std::atomic<std::uint32_t> next_unused_{0};  ///< slots at and above never used
  std::array<std::uint32_t, kSlots> free_{};  ///< stack of retired slots
  std::uint32_t free_count_ = 0;
};

}  // namespace sova::capi
