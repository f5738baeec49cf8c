// PendingRanges: the VA ranges one stream freed whose frees are not yet known
// complete (docs/design.md, "The pool" and "A stable layout").
//
// Free blocks in the heap carry no stream: adjacent free blocks always
// coalesce, so the heap's layout, and with it every placement, is the same
// whenever frees are seen complete. What
// another stream may not touch yet is kept here instead, per freeing stream:
//   * the freeing stream itself may use its ranges at once (stream order);
//   * another stream may use a range only after the free is complete, or
//     with a wait on a fence that covers it;
//   * no chunk overlapping a range may be unmapped (released or remapped):
//     work on the freeing stream may still read it.
// A range is dropped once its stream's safe epoch reaches its epoch.
// Guarded by the pool's heap lock.
#pragma once

#include "core/node_cache.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace sova::detail {

class PendingRanges {
 public:
  PendingRanges() : ranges_(std::less<>{}, RecyclingAllocator<std::pair<const std::size_t, Range>>(&nodes_)) {}
  PendingRanges(const PendingRanges&) = delete;
  PendingRanges& operator=(const PendingRanges&) = delete;

  /// Records [offset, offset + bytes) as freed in `epoch`. Ranges it overlaps
  /// become one, with the latest epoch (a conservative union: a range is
  /// reused only once all its frees are complete), when next asked about.
  /// O(1): the range is staged, and merged into the ordered ranges only when
  /// a query needs them; a range whose own epoch completes first is dropped
  /// unmerged. A stream alone in its pool (a training loop) is asked about
  /// only when it grows, and its flushes added every free of the last fence
  /// interval to the map: ~450 instructions a miss, a fifth of a replay's
  /// slow path (callgrind, vit_train).
  /// Throws std::bad_alloc, changing nothing.
  void add(std::size_t offset, std::size_t bytes, std::uint64_t epoch);
  /// Drops the ranges whose epoch is <= safe_epoch. O(1) when none is (the
  /// slow path calls it on every miss, and the safe epoch moves at most once
  /// per fence interval); a walk over every range otherwise.
  void drop_complete(std::uint64_t safe_epoch) noexcept;
  /// The latest epoch of the ranges overlapping [offset, offset + bytes);
  /// 0 when none does. Staged ranges are read unmerged (a scan of them): the
  /// answer is at least the latest free of every place in the range, but may
  /// miss a later epoch that merging would have spread from a neighbour.
  std::uint64_t latest_overlapping(std::size_t offset, std::size_t bytes) const noexcept;
  /// Where the last range overlapping [offset, offset + bytes) ends; 0 when
  /// none overlaps.
  std::size_t end_of_overlapping(std::size_t offset, std::size_t bytes) const noexcept;
  bool empty() const noexcept { return ranges_.empty() && staged_.empty(); }
  /// The merged ranges (staged ones merged first).
  std::size_t count() const noexcept;
  /// The bytes they cover.
  std::size_t bytes() const noexcept;
  /// add() merges what is staged once it holds this many more ranges than
  /// twice the merged ones (96 KiB of them): a stream alone on the GPU
  /// flushes ~1,500 blocks between two fences (vit_train's replay, one fence
  /// a millisecond), which a bound of 256 merged anyway.
  static constexpr std::size_t kStagedBeforeMerge = 4096;
  /// Ranges added and not merged yet (bounded: kStagedBeforeMerge).
  std::size_t staged() const noexcept { return staged_.size(); }

 private:
  struct Range {
    std::size_t end = 0;
    std::uint64_t epoch = 0;
  };
  struct Staged {
    std::size_t offset = 0;
    std::size_t end = 0;
    std::uint64_t epoch = 0;
    bool overlaps(std::size_t at, std::size_t bytes) const noexcept { return offset < at + bytes && at < end; }
  };
  using Map = std::map<std::size_t, Range, std::less<>, RecyclingAllocator<std::pair<const std::size_t, Range>>>;
  /// Merges the staged ranges into ranges_, oldest first (the order add()
  /// saw them, so the union is what eager merging gave). Logically const:
  /// what the queries answer does not change. A range whose node cannot be
  /// allocated stays staged, and the queries read it there too.
  void merge_staged() const noexcept;
  /// Merges one range into ranges_; throws std::bad_alloc, changing nothing.
  void merge(std::size_t offset, std::size_t end, std::uint64_t epoch);
  /// The first range that may overlap [offset, ...): the one starting before
  /// `offset` if it reaches past it, else the first starting at or after it.
  Map::iterator first_overlapping(std::size_t offset) noexcept;
  Map::const_iterator first_overlapping(std::size_t offset) const noexcept {
    return const_cast<PendingRanges*>(this)->first_overlapping(offset);
  }
  NodeCache nodes_;        ///< before ranges_: outlives it
  Map ranges_;             ///< by start; never overlapping
  std::size_t bytes_ = 0;  ///< covered by ranges_
  /// Added and not merged yet, in the order added (guarded, as everything
  /// here, by the heap lock; mutable for merge_staged).
  mutable std::vector<Staged> staged_;
  /// No range, merged or staged, has an epoch below this (a lower bound:
  /// merges may remove the oldest range; the next walk makes it exact).
  std::uint64_t oldest_epoch_ = ~std::uint64_t{0};
};

}  // namespace sova::detail
