// sova C API — pool handles (see handle_table.hpp).
#include "capi/handle_table.hpp"

namespace sova::capi {

bool HandleTable::publish(PoolEntry* e) noexcept {
  std::uint32_t slot;
  if (free_count_ > 0) {
    slot = free_[--free_count_];
  } else if (const std::uint32_t unused = next_unused_.load(std::memory_order_relaxed); unused < kSlots) {
    slot = unused;
    next_unused_.store(unused + 1, std::memory_order_relaxed);
  } else {
    return false;
  }
  // 46 bits of generation: one pool created per nanosecond would take two
  // years to wrap, and a wrapped value still needs the same slot to collide.
  const std::uintptr_t generation = next_generation_.fetch_add(1, std::memory_order_relaxed);
  e->handle_slot = slot;
  e->handle = (generation << (kSlotBits + kTagBits)) | (std::uintptr_t{slot} << kTagBits) | kTag;
  slots_[slot].store(e, std::memory_order_release);
  return true;
}

void HandleTable::retire(PoolEntry* e) noexcept {
  slots_[e->handle_slot].store(nullptr, std::memory_order_release);
  free_[free_count_++] = e->handle_slot;
}

}  // namespace sova::capi
