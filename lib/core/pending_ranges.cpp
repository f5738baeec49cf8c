#include "core/pending_ranges.hpp"

#include <algorithm>
#include <new>

namespace sova::detail {

void PendingRanges::add(std::size_t offset, std::size_t bytes, std::uint64_t epoch) {
  // Bounded: a stream whose work does not complete for long, freeing the
  // same places again and again, would stage without end what merging keeps
  // to one range per place.
  if (staged_.size() >= kStagedBeforeMerge + 2 * ranges_.size()) merge_staged();
  staged_.push_back(Staged{offset, offset + bytes, epoch});
  oldest_epoch_ = std::min(oldest_epoch_, epoch);
}

void PendingRanges::merge(std::size_t start, std::size_t end, std::uint64_t epoch) {
  auto it = first_overlapping(start);
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
}

void PendingRanges::merge_staged() const noexcept {
  if (staged_.empty()) return;
  auto* self = const_cast<PendingRanges*>(this);
  std::size_t merged = 0;
  try {
    for (; merged < staged_.size(); ++merged) {
      const Staged& s = staged_[merged];
      self->merge(s.offset, s.end, s.epoch);
    }
  } catch (const std::bad_alloc&) {
    // No node for this one: it and the rest stay staged (the queries read them).
  }
  staged_.erase(staged_.begin(), staged_.begin() + static_cast<std::ptrdiff_t>(merged));
}

void PendingRanges::drop_complete(std::uint64_t safe_epoch) noexcept {
  if (safe_epoch < oldest_epoch_) return;
  std::uint64_t oldest = ~std::uint64_t{0};
  // A staged range complete by its own epoch goes unmerged: what it covers
  // was last freed in that epoch (a later free there is a range of its own).
  staged_.erase(std::remove_if(staged_.begin(), staged_.end(),
                               [&](const Staged& s) {
                                 if (s.epoch <= safe_epoch) return true;
                                 oldest = std::min(oldest, s.epoch);
                                 return false;
                               }),
                staged_.end());
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
  // The staged ranges are read where they are, not merged: remapping asks
  // this for every chunk it moves (a pin), and merging every free since the
  // last fence cost a growth a quarter of its host time (lstm_train). Unmerged,
  // a staged range answers for what it covers alone: each place's latest free
  // is still seen (it has a range of its own), only not its neighbours'.
  std::uint64_t latest = 0;
  for (const Staged& s : staged_) {
    if (s.overlaps(offset, bytes)) latest = std::max(latest, s.epoch);
  }
  for (auto it = first_overlapping(offset); it != ranges_.end() && it->first < offset + bytes; ++it) {
    latest = std::max(latest, it->second.epoch);
  }
  return latest;
}

std::size_t PendingRanges::end_of_overlapping(std::size_t offset, std::size_t bytes) const noexcept {
  merge_staged();
  std::size_t end = 0;
  for (auto it = first_overlapping(offset); it != ranges_.end() && it->first < offset + bytes; ++it) {
    end = it->second.end;  // ranges are ordered and disjoint: the last one ends last
  }
  for (const Staged& s : staged_) {  // left staged only when host memory ran out
    if (s.overlaps(offset, bytes)) end = std::max(end, s.end);
  }
  return end;
}

std::size_t PendingRanges::count() const noexcept {
  merge_staged();
  return ranges_.size() + staged_.size();
}

std::size_t PendingRanges::bytes() const noexcept {
  merge_staged();
  std::size_t staged_bytes = 0;  // an overcount if they overlap: they are left only without host memory
  for (const Staged& s : staged_) staged_bytes += s.end - s.offset;
  return bytes_ + staged_bytes;
}

}  // namespace sova::detail
