// BlockMap: from a block's start offset to its Block, without a lock.
//
// A two-level radix table: one leaf per granule that has ever held a block
// start, one entry per kAlignment bytes. Reads (deallocate's lookup) are two
// dependent loads; writes happen under the heap lock. Host memory: a leaf is
// granule / 512 pointers (32 KiB per 2 MiB granule), only for granules that
// hold block starts.
#pragma once

#include "core/block.hpp"

#include <atomic>
#include <cstddef>
#include <memory>

namespace sova::detail {

class BlockMap {
 public:
  BlockMap(std::size_t va_bytes, std::size_t granularity)
      : granule_shift_(shift_of(granularity)),
        leaf_entries_(granularity / kAlignment),
        leaves_count_(va_bytes / granularity),
        leaves_(new std::atomic<std::atomic<Block*>*>[leaves_count_]) {
    for (std::size_t i = 0; i < leaves_count_; ++i) leaves_[i].store(nullptr, std::memory_order_relaxed);
  }
  ~BlockMap() {
    for (std::size_t i = 0; i < leaves_count_; ++i) delete[] leaves_[i].load(std::memory_order_relaxed);
  }
  BlockMap(const BlockMap&) = delete;
  BlockMap& operator=(const BlockMap&) = delete;

  /// The block starting exactly at `offset`, or nullptr. Lock-free.
  Block* find(std::size_t offset) const noexcept {
    const std::size_t leaf_index = offset >> granule_shift_;
    if (leaf_index >= leaves_count_) return nullptr;
    const std::atomic<Block*>* leaf = leaves_[leaf_index].load(std::memory_order_acquire);
    if (leaf == nullptr) return nullptr;
    return leaf[(offset & ((std::size_t{1} << granule_shift_) - 1)) / kAlignment].load(std::memory_order_acquire);
  }

  /// Records `block` as starting at `offset` (nullptr clears). Heap lock held.
  /// Throws std::bad_alloc when a leaf cannot be allocated.
  void set(std::size_t offset, Block* block) {
    const std::size_t leaf_index = offset >> granule_shift_;
    std::atomic<Block*>* leaf = leaves_[leaf_index].load(std::memory_order_relaxed);
    if (leaf == nullptr) {
      if (block == nullptr) return;
      leaf = make_leaf(leaf_index);
    }
    leaf[(offset & ((std::size_t{1} << granule_shift_) - 1)) / kAlignment].store(block, std::memory_order_release);
  }

  /// Makes sure set(offset, ...) cannot throw afterwards.
  void prepare(std::size_t offset) {
    const std::size_t leaf_index = offset >> granule_shift_;
    if (leaves_[leaf_index].load(std::memory_order_relaxed) == nullptr) make_leaf(leaf_index);
  }

 private:
  std::atomic<Block*>* make_leaf(std::size_t leaf_index) {
    auto* leaf = new std::atomic<Block*>[leaf_entries_];
    for (std::size_t i = 0; i < leaf_entries_; ++i) leaf[i].store(nullptr, std::memory_order_relaxed);
    leaves_[leaf_index].store(leaf, std::memory_order_release);
    return leaf;
  }
  static unsigned shift_of(std::size_t power_of_two) noexcept {
    unsigned shift = 0;
    while ((std::size_t{1} << shift) < power_of_two) ++shift;
    return shift;
  }
  unsigned granule_shift_;
  std::size_t leaf_entries_;
  std::size_t leaves_count_;
  std::unique_ptr<std::atomic<std::atomic<Block*>*>[]> leaves_;
};

}  // namespace sova::detail
