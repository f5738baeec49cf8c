// Heap: every block of the pool's VA range in address order, the free ones
// in a best-fit index, and the ranges each stream freed that are not yet
// known complete (pending: only that stream may use them, others after a
// fence, and no chunk under them moves).
//
// It owns the blocks (BlockPool), the block map from a start offset to its
// block (read without a lock by deallocate), the free index, every stream's
// pending ranges (keyed by its StreamState, which it never reads or writes),
// and the heap lock that guards them all. Every member
// but find() and mutex() runs with the heap lock held by the caller: the
// slow path holds it across its whole ladder. The blocks' placement inside a
// free range is the policy's (Placement); the heap keeps other streams'
// pending frees out of it.
#pragma once

#include "core/block.hpp"
#include "core/block_map.hpp"
#include "core/block_pool.hpp"
#include "core/free_index.hpp"
#include "core/heap_mutex.hpp"
#include "core/placement.hpp"
#include "core/pointer_status.hpp"
#include "core/pending_ranges.hpp"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace sova::detail {

struct StreamState;

/// Best-fit candidates the heap offers the placement policy before giving up
/// (docs/design.md, "Tuning constants").
inline constexpr int kBackedScan = kPlaceCandidates;
/// Other streams' pending ranges a placement steps over in one free block.
inline constexpr int kPendingSkips = 4;
/// A stream asks for a fence every this many pending ranges staged between two fences.
inline constexpr std::size_t kFenceEveryStaged = 1024;

/// A block chosen for a request, and where in it the request is placed.
struct Fit {
  Block* block = nullptr;
  std::size_t at = 0;
};

class Heap {
 public:
  /// Called when host memory to remember a pending range is lacking: must
  /// make every free made so far complete (a synchronize). No stream lock
  /// may be taken (callers may hold the owner's).
  using CompleteAll = void (*)(void* context) noexcept;

  /// The whole range [0, va_bytes) starts as one free block; two where the
  /// policy keeps regions (placement.region_boundary(): never merged across).
  /// Throws std::bad_alloc.
  Heap(std::size_t va_bytes, std::size_t granularity, const Placement& placement, CompleteAll complete_all,
       void* context);
  Heap(const Heap&) = delete;
  Heap& operator=(const Heap&) = delete;

  HeapMutex& mutex() noexcept { return mutex_; }
  /// The block starting at `offset`, or nullptr. No lock: the block map is
  /// read lock-free (its blocks are never freed while the pool lives).
  Block* find(std::size_t offset) const noexcept { return map_.find(offset); }

  /// The first of up to kBackedScan free blocks of at least `size` bytes, in
  /// best-fit order, backed or not, where the policy places the request clear
  /// of other streams' pending frees; the largest block (the never-used tail)
  /// is tried last as well. The caller backs what the placement lacks.
  Fit best_fit(StreamState* user, std::size_t size) noexcept;
  /// Removes `fit.block` from the free index and splits off what lies before
  /// `fit.at` and beyond `size` as free blocks; the block then starts at
  /// fit.at and is live. nullptr (nothing changed) when host memory for a
  /// split is lacking.
  Block* carve(Fit fit, std::size_t size) noexcept;
  /// Makes `block` free and merges it with its free neighbours.
  void insert_free(Block* block) noexcept;

  // ---- pending ranges: per freeing stream, keyed by its state -----------------

  /// Makes the cached blocks of `list` (linked through bin_next) free, each
  /// range pending on `owner` unless `owner_safe_epoch` covers it. True when
  /// `owner` should record a fence (add_pending).
  bool take_from_cache(const StreamState* owner, std::uint64_t owner_safe_epoch, Block* list) noexcept;
  /// Records a range pending on `owner` (completes every free instead, by
  /// CompleteAll, when host memory for it is lacking). True every
  /// kFenceEveryStaged ranges staged: the owner should record a fence, so
  /// that they drop unmerged once it completes.
  bool add_pending(const StreamState* owner, std::size_t offset, std::size_t bytes, std::uint64_t epoch) noexcept;
  /// Drops `owner`'s pending ranges that `safe_epoch` covers.
  void drop_complete_pending(const StreamState* owner, std::uint64_t safe_epoch) noexcept;
  /// Whether `owner` has ranges pending.
  bool has_pending(const StreamState* owner) const noexcept;
  /// Whether any stream has ranges pending.
  bool any_pending() const noexcept;
  /// The bytes `owner`'s pending ranges cover.
  std::size_t pending_bytes(const StreamState* owner) const noexcept;
  /// The latest epoch of `owner`'s pending ranges overlapping the range; 0
  /// when none does.
  std::uint64_t latest_pending(const StreamState* owner, std::size_t offset, std::size_t bytes) const noexcept;
  /// Where the last pending free of a stream other than `user` overlapping
  /// the range ends; 0 when none overlaps (nullptr: any stream's).
  std::size_t pending_end_elsewhere(const StreamState* user, std::size_t offset, std::size_t bytes) const noexcept;
  bool pending_elsewhere(const StreamState* user, std::size_t offset, std::size_t bytes) const noexcept {
    return pending_end_elsewhere(user, offset, bytes) != 0;
  }
  /// The first of up to kBackedScan free blocks of at least `size` bytes, in
  /// best-fit order, where the policy places the request (relaxed) so that
  /// `usable(at)` holds and no pending free lies under it but `user`'s own
  /// and `fenced`'s up to `fence_epoch` (a fence `user` can wait for).
  template <class Usable>
  Fit fit_covered_by_fence(const StreamState* user, const StreamState* fenced, std::uint64_t fence_epoch,
                           std::size_t size, Usable usable) const noexcept {
    int scanned = 0;
    for (auto it = free_.lower_bound(size); it != free_.end() && scanned < kBackedScan; ++it, ++scanned) {
      const std::size_t at = placement_.place(FreeRange{(*it)->offset, (*it)->size}, size, granularity_,
                                              /*relaxed=*/true);
      if (at != PlacementPolicy::kNoFit && usable(at) && covered_by_fence(user, fenced, fence_epoch, at, size)) {
        return Fit{*it, at};
      }
    }
    return {};
  }
  /// Every stream with pending ranges is listed among those the fits step
  /// around (the invariant checker's question).
  bool pending_listed() const noexcept;
  /// Every free block, by size then offset.
  const FreeIndex& free_blocks() const noexcept { return free_; }

  /// Whether address neighbours `left` and `right` must be one block: both
  /// free, and not on either side of the policy's region boundary.
  bool merges_with(const Block* left, const Block* right) const noexcept;
  /// What `offset` is in the heap's tiling (pointer_status.hpp); block_start
  /// is an offset. Takes the heap lock: error paths only.
  PointerStatus status_of(std::size_t offset);

 private:
  /// Where in `block` the policy places `size` bytes clear of other streams'
  /// pending frees: after them, when the policy's place overlaps one (up to
  /// kPendingSkips times); PlacementPolicy::kNoFit when nowhere.
  std::size_t place_clear_of_pending(StreamState* user, const Block* block, std::size_t size,
                                     bool relaxed) const noexcept;
  /// Whether the only pending frees overlapping [at, at + bytes) are
  /// `user`'s and `fenced`'s up to `fence_epoch`.
  bool covered_by_fence(const StreamState* user, const StreamState* fenced, std::uint64_t fence_epoch,
                        std::size_t at, std::size_t bytes) const noexcept;
  /// `owner`'s ranges, made empty on first use (never removed: a state
  /// lives as long as the pool, and its ranges' node cache stays warm).
  /// Throws std::bad_alloc.
  PendingRanges& pending_of(const StreamState* owner);
  const PendingRanges* find_pending(const StreamState* owner) const noexcept {
    const auto it = pending_.find(owner);
    return it != pending_.end() ? &it->second : nullptr;
  }
  /// Merges `right` into its address neighbour `left`; `right` is recycled.
  /// Neither may be in the free index.
  void join(Block* left, Block* right) noexcept;

  const Placement& placement_;
  const std::size_t granularity_;
  CompleteAll complete_all_;
  void* complete_all_context_;
  HeapMutex mutex_;
  BlockMap map_;
  BlockPool blocks_;
  FreeIndex free_;
  /// Every stream's pending ranges, keyed by its state (node-based: the
  /// ranges never move).
  std::unordered_map<const StreamState*, PendingRanges> pending_;
  /// The streams whose ranges are not empty (at most one empty entry after
  /// a failed add), with their ranges: what a fit steps around.
  std::vector<std::pair<const StreamState*, PendingRanges*>> pending_streams_;
};

}  // namespace sova::detail
