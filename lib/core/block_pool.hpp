// Type-stable storage for Block objects.
//
// Blocks are recycled, never returned to the system while the pool lives, so
// a racing lookup of a stale pointer (a double free from another thread)
// reads a Block, not freed memory, and fails its state check. Not
// thread-safe: used under the heap lock.
#pragma once

#include "core/block.hpp"

#include <memory>
#include <vector>

namespace sova::detail {

class BlockPool {
 public:
  /// A fresh block (state free, links null). Throws std::bad_alloc.
  Block* make() {
    if (free_ == nullptr) grow();
    Block* block = free_;
    free_ = block->bin_next;
    block->bin_next = nullptr;
    ++in_use_;
    return block;
  }
  void recycle(Block* block) noexcept {
    block->prev = block->next = nullptr;
    block->stream = nullptr;
    block->size = block->requested = 0;
    block->epoch = 0;
    block->state.store(BlockState::free, std::memory_order_relaxed);
    block->graph_memory.store(false, std::memory_order_relaxed);
    block->bin_next = free_;
    free_ = block;
    --in_use_;
  }
  std::size_t in_use() const noexcept { return in_use_; }

 private:
  static constexpr std::size_t kSlab = 256;
  void grow() {
    slabs_.push_back(std::make_unique<Block[]>(kSlab));
    Block* slab = slabs_.back().get();
    for (std::size_t i = 0; i < kSlab; ++i) {
      slab[i].bin_next = free_;
      free_ = &slab[i];
    }
  }
  std::vector<std::unique_ptr<Block[]>> slabs_;
  Block* free_ = nullptr;
  std::size_t in_use_ = 0;
};

}  // namespace sova::detail
