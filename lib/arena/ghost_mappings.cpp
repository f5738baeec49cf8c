#include "arena/ghost_mappings.hpp"

#include <algorithm>

namespace sova::detail {

void GhostMappings::mark(std::size_t first, std::size_t granules, std::int32_t index) noexcept {
  std::fill_n(of_granule_.begin() + static_cast<std::ptrdiff_t>(first), granules, index);
}

bool GhostMappings::move_back(std::int32_t slot, std::size_t granules, std::size_t from, std::size_t to,
                              bool accessible_from, const Pin& leaving) noexcept {
  if (static_cast<std::size_t>(slot) >= of_chunk_.size()) return false;
  List& list = of_chunk_[static_cast<std::size_t>(slot)];
  for (std::size_t i = 0; i < kPerChunk && list[i] != kNone; ++i) {
    const std::int32_t index = list[i];
    Record& ghost = records_[index];
    if (ghost.first_granule != to || !ghost.accessible) continue;
    // Back to a place the chunk left: still mapped, with its access. The
    // place it leaves becomes the ghost (the newest).
    mark(to, granules, kNone);
    ghost.first_granule = from;
    ghost.accessible = accessible_from;
    ghost.pin = leaving;  // the old pin went with the place it came back to, which stays mapped
    mark(from, granules, index);
    std::rotate(list.begin() + static_cast<std::ptrdiff_t>(i), list.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                std::find(list.begin(), list.end(), kNone));
    return true;
  }
  return false;
}

bool GhostMappings::make_room(std::int32_t slot) noexcept {
  const List& list = of(slot);
  return list.back() == kNone || drop(list.front());
}

std::int32_t GhostMappings::acquire(std::int32_t slot) noexcept {
  try {
    if (static_cast<std::size_t>(slot) >= of_chunk_.size())
      of_chunk_.resize(static_cast<std::size_t>(slot) + 1, kEmpty);
    if (!free_records_.empty()) {
      const std::int32_t index = free_records_.back();
      free_records_.pop_back();
      return index;
    }
    records_.emplace_back();
    try {
      free_records_.reserve(records_.size());  // drop's and give_back's push_back never throw
    } catch (const std::bad_alloc&) {
      records_.pop_back();
      return kNone;
    }
    return static_cast<std::int32_t>(records_.size() - 1);
  } catch (const std::bad_alloc&) {
    return kNone;
  }
}

void GhostMappings::keep(std::int32_t index, std::int32_t slot, std::size_t granules, std::size_t first,
                         bool accessible, const Pin& pin) noexcept {
  records_[index] = Record{slot, first, granules, accessible, pin};
  mark(first, granules, index);
  List& list = of_chunk_[static_cast<std::size_t>(slot)];  // sized by acquire
  *std::find(list.begin(), list.end(), kNone) = index;
}

bool GhostMappings::drop(std::int32_t index) noexcept {
  const Record ghost = records_[index];
  if (ghost.pin.owner != nullptr && settler_ != nullptr && !settler_(settler_context_, ghost.pin)) return false;
  // A mapping that could not be unmapped stays a ghost, record and granules:
  // forgotten, it would lie under granules the Arena takes for free VA, and
  // every later map there would fail.
  if (driver_.unmap(base_ + ghost.first_granule * granularity_, ghost.granules * granularity_) != cudaSuccess) {
    return false;
  }
  mark(ghost.first_granule, ghost.granules, kNone);
  List& list = of_chunk_[static_cast<std::size_t>(ghost.slot)];
  auto it = std::find(list.begin(), list.end(), index);
  std::copy(it + 1, list.end(), it);
  list.back() = kNone;
  records_[index] = Record{};
  free_records_.push_back(index);  // capacity reserved in acquire: no throw
  return true;
}

bool GhostMappings::drop_in(std::size_t first, std::size_t granules) noexcept {
  for (std::size_t g = first; g < first + granules; ++g) {
    if (of_granule_[g] != kNone && !drop(of_granule_[g])) return false;
  }
  return true;
}

bool GhostMappings::drop_of(std::int32_t slot) noexcept {
  while (of(slot).front() != kNone) {
    if (!drop(of(slot).front())) return false;
  }
  return true;
}

bool GhostMappings::drop_all() noexcept {
  for (std::size_t slot = 0; slot < of_chunk_.size(); ++slot) {
    if (!drop_of(static_cast<std::int32_t>(slot))) return false;
  }
  return true;
}

}  // namespace sova::detail
