// The heap: free blocks, best fit, split and coalesce. Every function here
// runs with heap_mutex_ held.
#include "core/pool_core.hpp"

#include <algorithm>

namespace sova::detail {

std::set<Block*, BySizeThenOffset>& PoolCore::free_set_of(const Block* block) noexcept {
  return block->stream != nullptr ? block->stream->pending : safe_;
}

void PoolCore::erase_free(Block* block) noexcept { free_set_of(block).erase(block); }

namespace {

// Whether `neighbour` is free under `block`'s tag (both safe, or both pending
// on the same stream), so that the two may be merged.
bool free_with_same_tag(const Block* neighbour, const Block* block) noexcept {
  return neighbour != nullptr && neighbour->state.load(std::memory_order_acquire) == BlockState::free &&
         neighbour->stream == block->stream;
}

}  // namespace

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
  if (Block* prev = block->prev; free_with_same_tag(prev, block)) {
    erase_free(prev);
    join(prev, block);
    block = prev;
  }
  if (Block* next = block->next; free_with_same_tag(next, block)) {
    erase_free(next);
    join(block, next);
  }
  free_set_of(block).insert(block);
}

Block* PoolCore::best_fit(std::set<Block*, BySizeThenOffset>& set, std::size_t size,
                          bool backed_only) noexcept {
  auto it = set.lower_bound(size);
  if (!backed_only) return it == set.end() ? nullptr : *it;
  for (int scanned = 0; it != set.end() && scanned < kBackedScan; ++it, ++scanned) {
    if (arena_.is_backed((*it)->offset, size)) return *it;
  }
  return nullptr;
}

Block* PoolCore::best_fit_for(StreamState* state, std::size_t size, bool backed_only) noexcept {
  Block* safe = best_fit(safe_, size, backed_only);
  Block* own = state != nullptr ? best_fit(state->pending, size, backed_only) : nullptr;
  if (safe == nullptr) return own;
  if (own == nullptr) return safe;
  return own->size <= safe->size ? own : safe;  // ties go to our own: keeps safe memory for others
}

bool PoolCore::carve(Block* block, std::size_t size) noexcept {
  Block* rest = nullptr;
  if (block->size - size >= kAlignment) {
    try {
      rest = blocks_.make();
      map_.prepare(block->offset + size);
    } catch (...) {
      if (rest != nullptr) blocks_.recycle(rest);
      return false;
    }
  }
  erase_free(block);
  // Taken: no longer a merge candidate for its neighbours.
  block->state.store(BlockState::live, std::memory_order_release);
  if (rest != nullptr) {
    rest->offset = block->offset + size;
    rest->size = block->size - size;
    rest->stream = block->stream;
    rest->epoch = block->epoch;
    rest->prev = block;
    rest->next = block->next;
    if (block->next != nullptr) block->next->prev = rest;
    block->next = rest;
    block->size = size;
    map_.set(rest->offset, rest);
    rest->state.store(BlockState::free, std::memory_order_release);
    free_set_of(rest).insert(rest);
  }
  return true;
}

void PoolCore::take_from_cache(StreamState* owner, std::uint64_t owner_safe_epoch,
                               Block* block) noexcept {
  block->stream = block->epoch <= owner_safe_epoch ? nullptr : owner;
  insert_free(block);
}

}  // namespace sova::detail
