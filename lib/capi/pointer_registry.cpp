// sova C API — pointer registry (see pointer_registry.hpp).
#include "capi/pointer_registry.hpp"

namespace sova::capi {

bool PointerRegistry::add(PoolEntry* e) noexcept {
  const std::uint32_t n = limit_.load(std::memory_order_relaxed);
  // The lowest hole keeps the scanned prefix short.
  for (std::uint32_t i = 0; i < n; ++i) {
    if (owners_[i].load(std::memory_order_relaxed) == nullptr) {
      e->owner_slot = i;
      owners_[i].store(e, std::memory_order_release);
      return true;
    }
  }
  if (n == kMaxOwners) return false;
  e->owner_slot = n;
  owners_[n].store(e, std::memory_order_release);
  limit_.store(n + 1, std::memory_order_release);  // after the entry: readers see both
  return true;
}

void PointerRegistry::remove(PoolEntry* e) noexcept {
  owners_[e->owner_slot].store(nullptr, std::memory_order_release);
  // Shrink past trailing holes. A reader that loaded the old limit just scans
  // a few more empty slots; add() only ever fills below or at the limit.
  std::uint32_t n = limit_.load(std::memory_order_relaxed);
  while (n > 0 && owners_[n - 1].load(std::memory_order_relaxed) == nullptr) --n;
  limit_.store(n, std::memory_order_release);
}

}  // namespace sova::capi
