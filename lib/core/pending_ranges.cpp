#include "core/pending_ranges.hpp"

#include <algorithm>

namespace sova::detail {

void PendingRanges::add(std::size_t offset, std::size_t bytes, std::uint64_t epoch) {
  std::size_t start = offset;
  std::size_t end = offset + bytes;
  auto it = first_overlapping(offset);
  // The node comes first (a key no range has), so that a failed allocation
  // changes nothing.
  auto placeholder = ranges_.emplace_hint(ranges_.end(), ~std::size_t{0}, Range{});
  while (it != ranges_.end() && it->first < end && it != placeholder) {
    start = std::min(start, it->first);
    end = std::max(end, it->second.end);
    epoch = std::max(epoch, it->second.epoch);
    bytes_ -= it->second.end - it->first;
    it = ranges_.erase(it);
  }
  auto node = ranges_.extract(placeholder);  // re-keyed and inserted: no allocation
  node.key() = start;
  node.mapped() = Range{end, epoch};
  ranges_.insert(std::move(node));
  bytes_ += end - start;
  oldest_epoch_ = std::min(oldest_epoch_, epoch);
}

void PendingRanges::drop_complete(std::uint64_t safe_epoch) noexcept {
  if (safe_epoch < oldest_epoch_) return;
  std::uint64_t oldest = ~std::uint64_t{0};
  for (auto it = ranges_.begin(); it != ranges_.end();) {
    if (it->second.epoch <= safe_epoch) {
      bytes_ -= it->second.end - it->first;
      it = ranges_.erase(it);
    } else {
      oldest = std::min(oldest, it->second.epoch);
      ++it;
    }
  }
  oldest_epoch_ = oldest;
}

PendingRanges::Map::iterator PendingRanges::first_overlapping(std::size_t offset) noexcept {
  auto it = ranges_.lower_bound(offset);
  if (it != ranges_.begin()) {
    auto before = std::prev(it);
    if (before->second.end > offset) it = before;
  }
  return it;
}

std::uint64_t PendingRanges::latest_overlapping(std::size_t offset, std::size_t bytes) const noexcept {
  std::uint64_t latest = 0;
  for (auto it = first_overlapping(offset); it != ranges_.end() && it->first < offset + bytes; ++it) {
    latest = std::max(latest, it->second.epoch);
  }
  return latest;
}

std::size_t PendingRanges::end_of_overlapping(std::size_t offset, std::size_t bytes) const noexcept {
  std::size_t end = 0;
  for (auto it = first_overlapping(offset); it != ranges_.end() && it->first < offset + bytes; ++it) {
    end = it->second.end;  // ranges are ordered and disjoint: the last one ends last
  }
  return end;
}

}  // namespace sova::detail
