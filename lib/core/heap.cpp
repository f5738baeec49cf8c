// The heap: free blocks, best fit, split and coalesce, pending ranges. Every
// function here but the constructor and status_of runs with the heap lock
// held by the caller.
#include "core/heap.hpp"

#include <algorithm>
#include <mutex>

namespace sova::detail {

Heap::Heap(std::size_t va_bytes, std::size_t granularity, const Placement& placement, CompleteAll complete_all,
           void* context)
    : placement_(placement),
      granularity_(granularity),
      complete_all_(complete_all),
      complete_all_context_(context),
      map_(va_bytes, granularity) {
  const std::size_t boundary = placement_.region_boundary();
  Block* all = blocks_.make();
  all->offset = 0;
  all->size = boundary != 0 ? boundary : va_bytes;
  map_.set(0, all);
  free_.insert(all);
  if (boundary != 0) {
    Block* upper = blocks_.make();
    upper->offset = boundary;
    upper->size = va_bytes - boundary;
    upper->prev = all;
    all->next = upper;
    map_.set(upper->offset, upper);
    free_.insert(upper);
  }
}

bool Heap::merges_with(const Block* left, const Block* right) const noexcept {
  return left != nullptr && right != nullptr && left->state.load(std::memory_order_acquire) == BlockState::free &&
         right->state.load(std::memory_order_acquire) == BlockState::free &&
         right->offset != placement_.region_boundary();
}

void Heap::join(Block* left, Block* right) noexcept {
  map_.set(right->offset, nullptr);
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  blocks_.recycle(right);
}

void Heap::insert_free(Block* block) noexcept {
  block->state.store(BlockState::free, std::memory_order_release);
  block->stream = nullptr;
  block->bin_next = nullptr;
  if (Block* prev = block->prev; merges_with(prev, block)) {
    free_.erase(prev);
    join(prev, block);
    block = prev;
  }
  if (Block* next = block->next; merges_with(block, next)) {
    free_.erase(next);
    join(block, next);
  }
  free_.insert(block);
}

std::size_t Heap::pending_end_elsewhere(const StreamState* user, std::size_t offset, std::size_t bytes) const noexcept {
  std::size_t end = 0;
  for (const auto& [other, ranges] : pending_streams_) {
    if (other != user) end = std::max(end, ranges->end_of_overlapping(offset, bytes));
  }
  return end;
}

bool Heap::covered_by_fence(const StreamState* user, const StreamState* fenced, std::uint64_t fence_epoch,
                            std::size_t at, std::size_t bytes) const noexcept {
  for (const auto& [other, ranges] : pending_streams_) {
    if (other == user) continue;
    const std::uint64_t latest = ranges->latest_overlapping(at, bytes);
    if (latest != 0 && (other != fenced || latest > fence_epoch)) return false;
  }
  return true;
}

std::size_t Heap::place_clear_of_pending(StreamState* user, const Block* block, std::size_t size,
                                         bool relaxed) const noexcept {
  FreeRange range{block->offset, block->size};
  const std::size_t end = range.offset + range.size;
  for (int attempt = 0; attempt < kPendingSkips; ++attempt) {
    const std::size_t at = placement_.place(range, size, granularity_, relaxed);
    if (at == PlacementPolicy::kNoFit) return at;
    const std::size_t pending_end = pending_end_elsewhere(user, at, size);
    if (pending_end == 0) return at;
    if (pending_end >= end) break;
    range = FreeRange{pending_end, end - pending_end};  // after what is pending: 512-aligned
  }
  return PlacementPolicy::kNoFit;
}

Fit Heap::best_fit(StreamState* user, std::size_t size) noexcept {
  // Strictly first (the default policy's regions), then relaxed.
  for (const bool relaxed : {false, true}) {
    if (relaxed && !placement_.segregates()) break;
    auto try_block = [&](Block* block) -> Fit {
      const std::size_t at = place_clear_of_pending(user, block, size, relaxed);
      return at == PlacementPolicy::kNoFit ? Fit{} : Fit{block, at};
    };
    auto it = free_.lower_bound(size);
    for (int scanned = 0; it != free_.end() && scanned < kBackedScan; ++it, ++scanned) {
      if (Fit fit = try_block(*it); fit.block != nullptr) return fit;
    }
    // The candidates near the request's size may all hold other streams'
    // recent frees, still pending: streams that each flushed their cached
    // small blocks leave hundreds. Then the smallest blocks of a granule or
    // more, where the heap's coalesced free memory lies, before the tail:
    // without them the fit went to unbacked VA while 130-210 MiB lay free
    // and backed, beyond the budget, and each such miss flushed the
    // stream's kept blocks too (threads_mixed's residual miss storms,
    // test_retired_streams.cpp). A stream alone gets here only where the
    // policy refused all of them (strict regions): on the recorded traces,
    // never (placements identical).
    if (it != free_.end() && (*it)->size < granularity_) {
      auto large = free_.lower_bound(granularity_);
      for (int scanned = 0; large != free_.end() && scanned < kBackedScan; ++large, ++scanned) {
        if (Fit fit = try_block(*large); fit.block != nullptr) return fit;
      }
    }
    // The largest free range last: the VA's never-used tail, where any
    // placement fits when the nearer candidates' alignment did not.
    if (it != free_.end()) {
      if (Fit fit = try_block(*free_.rbegin()); fit.block != nullptr) return fit;
    }
  }
  return {};
}

Block* Heap::carve(Fit fit, std::size_t size) noexcept {
  Block* block = fit.block;
  const std::size_t before = fit.at - block->offset;
  const std::size_t after = block->size - before - size;
  Block* left = nullptr;
  Block* right = nullptr;
  try {
    if (before != 0) left = blocks_.make();
    if (after != 0) {
      right = blocks_.make();
      map_.prepare(fit.at + size);
    }
    if (before != 0) map_.prepare(fit.at);
  } catch (...) {
    if (left != nullptr) blocks_.recycle(left);
    if (right != nullptr) blocks_.recycle(right);
    return nullptr;
  }
  free_.erase(block);
  // Split-off pieces stay free; pending ranges over them stay as they are.
  auto split_off = [&](Block* piece, std::size_t offset, std::size_t bytes) {
    piece->offset = offset;
    piece->size = bytes;
    piece->stream = nullptr;
    map_.set(offset, piece);
    piece->state.store(BlockState::free, std::memory_order_release);
    free_.insert(piece);
  };
  if (left != nullptr) {
    // The Block object moves to the request's place; `left` takes the front.
    left->prev = block->prev;
    if (left->prev != nullptr) left->prev->next = left;
    left->next = block;
    block->prev = left;
    const std::size_t original_offset = block->offset;
    block->offset = fit.at;
    block->size -= before;
    map_.set(block->offset, block);
    split_off(left, original_offset, before);
  }
  // Taken: no longer a merge candidate for its neighbours.
  block->state.store(BlockState::live, std::memory_order_release);
  if (right != nullptr) {
    right->prev = block;
    right->next = block->next;
    if (block->next != nullptr) block->next->prev = right;
    block->next = right;
    block->size = size;
    split_off(right, fit.at + size, after);
  }
  return block;
}

bool Heap::take_from_cache(const StreamState* owner, std::uint64_t owner_safe_epoch, Block* list) noexcept {
  bool fence_due = false;
  while (list != nullptr) {
    Block* block = list;
    list = list->bin_next;  // before insert_free clears it
    if (block->epoch > owner_safe_epoch) fence_due |= add_pending(owner, block->offset, block->size, block->epoch);
    insert_free(block);
  }
  return fence_due;
}

PendingRanges& Heap::pending_of(const StreamState* owner) {
  return pending_.try_emplace(owner).first->second;
}

bool Heap::add_pending(const StreamState* owner, std::size_t offset, std::size_t bytes, std::uint64_t epoch) noexcept {
  try {
    PendingRanges& ranges = pending_of(owner);
    if (ranges.empty()) {
      pending_streams_.emplace_back(owner, &ranges);  // before add: a failure leaves at most an empty entry
    }
    ranges.add(offset, bytes, epoch);
    // Every kFenceEveryStaged ranges staged, a fence: the stream's next call
    // records it, and once it completes the ranges before it are dropped
    // unmerged. Otherwise a stream that flushes faster than its fence
    // interval (1 ms) reached the merge bound and merged thousands of ranges
    // into the ordered map (5-13% of a replay's host time on the simulation,
    // encoder_amp_train, gpt_train; docs/design.md, "Tuning constants").
    return ranges.staged() % kFenceEveryStaged == 0;
  } catch (const std::bad_alloc&) {
    // No host memory to remember the range: make the free complete instead.
    // Slow, but the range must never be handed to another stream early. (No
    // stream lock is taken: callers may hold `owner`'s.)
    complete_all_(complete_all_context_);
    return false;
  }
}

void Heap::drop_complete_pending(const StreamState* owner, std::uint64_t safe_epoch) noexcept {
  const auto it = pending_.find(owner);
  if (it == pending_.end()) return;  // never had a range
  PendingRanges& ranges = it->second;
  ranges.drop_complete(safe_epoch);
  if (ranges.empty()) {
    pending_streams_.erase(std::remove_if(pending_streams_.begin(), pending_streams_.end(),
                                          [&](const auto& entry) { return entry.first == owner; }),
                           pending_streams_.end());
  }
}

bool Heap::has_pending(const StreamState* owner) const noexcept {
  const PendingRanges* ranges = find_pending(owner);
  return ranges != nullptr && !ranges->empty();
}

bool Heap::any_pending() const noexcept {
  return std::any_of(pending_streams_.begin(), pending_streams_.end(),
                     [](const auto& entry) { return !entry.second->empty(); });
}

std::size_t Heap::pending_bytes(const StreamState* owner) const noexcept {
  const PendingRanges* ranges = find_pending(owner);
  return ranges != nullptr ? ranges->bytes() : 0;
}

std::uint64_t Heap::latest_pending(const StreamState* owner, std::size_t offset, std::size_t bytes) const noexcept {
  const PendingRanges* ranges = find_pending(owner);
  return ranges != nullptr && !ranges->empty() ? ranges->latest_overlapping(offset, bytes) : 0;
}

bool Heap::pending_listed() const noexcept {
  return std::all_of(pending_.begin(), pending_.end(), [&](const auto& entry) {
    return entry.second.empty() || std::any_of(pending_streams_.begin(), pending_streams_.end(),
                                               [&](const auto& listed) { return listed.first == entry.first; });
  });
}

PointerStatus Heap::status_of(std::size_t offset) {
  PointerStatus status;
  // Blocks tile the range in address order and change shape only under the
  // heap lock (block.hpp): under it, the walk from the first block sees a
  // consistent tiling. The state of a live or cached block may still flip
  // (a free or an allocation on a stream's fast path): the answer is a
  // snapshot, good for a message, not for a decision.
  std::lock_guard lock(mutex_);
  const Block* block = map_.find(0);
  while (block != nullptr && block->offset + block->size <= offset) block = block->next;
  if (block == nullptr) return status;  // cannot happen while the tiling holds; say "outside"
  const BlockState state = block->state.load(std::memory_order_acquire);
  const bool at_start = block->offset == offset;
  if (state == BlockState::live) {
    status.kind = at_start ? PointerStatus::Kind::live : PointerStatus::Kind::inside_live;
    status.block_start = block->offset;
    status.block_bytes = block->requested;
  } else if (state == BlockState::cached && at_start) {
    status.kind = PointerStatus::Kind::freed;  // only a live block becomes cached: it was freed
  } else {
    // Free in the heap: a freed block merged with its neighbours, or memory
    // never handed out; nothing tells which.
    status.kind = PointerStatus::Kind::inside_free;
  }
  return status;
}

}  // namespace sova::detail
