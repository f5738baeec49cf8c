// The heap: free blocks, best fit, split and coalesce. Every function here
// runs with heap_mutex_ held.
#include "core/pool_core.hpp"

#include <algorithm>

namespace sova::detail {

std::set<Block*, BySizeThenOffset>& PoolCore::free_set_of(const Block* block) noexcept {
  return block->stream != nullptr ? block->stream->pending : safe_;
}

void PoolCore::erase_free(Block* block) noexcept { free_set_of(block).erase(block); }

bool PoolCore::merges_with(const Block* left, const Block* right) const noexcept {
  return left != nullptr && right != nullptr &&
         left->state.load(std::memory_order_acquire) == BlockState::free &&
         right->state.load(std::memory_order_acquire) == BlockState::free && left->stream == right->stream &&
         right->offset != placement_.region_boundary();
}

void PoolCore::join(Block* left, Block* right) noexcept {
  map_.set(right->offset, nullptr);
  left->size += right->size;
  left->epoch = std::max(left->epoch, right->epoch);  // the merged free completes with the later one
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  blocks_.recycle(right);
}

void PoolCore::insert_free(Block* block) noexcept {
  block->state.store(BlockState::free, std::memory_order_release);
  block->bin_next = nullptr;
  if (Block* prev = block->prev; merges_with(prev, block)) {
    erase_free(prev);
    join(prev, block);
    block = prev;
  }
  if (Block* next = block->next; merges_with(block, next)) {
    erase_free(next);
    join(block, next);
  }
  free_set_of(block).insert(block);
}

Fit PoolCore::best_fit(std::set<Block*, BySizeThenOffset>& set, std::size_t size, std::size_t need,
                      bool backed_only) noexcept {
  const std::size_t granularity = arena_.granularity();
  // Strictly first (the default policy's regions), then relaxed.
  for (const bool relaxed : {false, true}) {
    if (relaxed && !placement_.segregates()) break;
    auto try_block = [&](Block* block) -> Fit {
      const std::size_t at = placement_.place(range_of(block), size, granularity, relaxed);
      if (at == PlacementPolicy::kNoFit) return {};
      if (backed_only && !arena_.is_backed(at, need)) return {};
      return Fit{block, at};
    };
    auto it = set.lower_bound(size);
    for (int scanned = 0; it != set.end() && scanned < kBackedScan; ++it, ++scanned) {
      if (Fit fit = try_block(*it); fit.block != nullptr) return fit;
    }
    // The largest free range last: for growth, the VA's never-used tail, where
    // any placement fits when the nearer candidates' alignment did not.
    if (!backed_only && it != set.end()) {
      if (Fit fit = try_block(*set.rbegin()); fit.block != nullptr) return fit;
    }
  }
  return {};
}

Fit PoolCore::best_fit_for(StreamState* state, std::size_t size, std::size_t need, bool backed_only) noexcept {
  const Fit safe = best_fit(safe_, size, need, backed_only);
  const Fit own = state != nullptr ? best_fit(state->pending, size, need, backed_only) : Fit{};
  if (safe.block == nullptr) return own;
  if (own.block == nullptr) return safe;
  return own.block->size <= safe.block->size ? own : safe;  // ties go to our own: keeps safe memory for others
}

Block* PoolCore::carve(Fit fit, std::size_t size) noexcept {
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
  erase_free(block);
  // A split-off piece keeps the block's tag and epoch: free the same way.
  auto split_off = [&](Block* piece, std::size_t offset, std::size_t bytes) {
    piece->offset = offset;
    piece->size = bytes;
    piece->stream = block->stream;
    piece->epoch = block->epoch;
    map_.set(offset, piece);
    piece->state.store(BlockState::free, std::memory_order_release);
    free_set_of(piece).insert(piece);
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

void PoolCore::take_from_cache(StreamState* owner, std::uint64_t owner_safe_epoch,
                               Block* block) noexcept {
  block->stream = block->epoch <= owner_safe_epoch ? nullptr : owner;
  insert_free(block);
}

}  // namespace sova::detail
