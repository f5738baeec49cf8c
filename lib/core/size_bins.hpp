// SizeBins: one stream's cache of freed blocks, keyed by exact size.
//
// An open-addressing table from block size to an intrusive LIFO list
// (Block::bin_next). pop and push are a hash, a short probe and a pointer
// swap: the fast path's core (budget ~5 ns each). pop and push never remove a
// key (an emptied list keeps its slot); the table doubles when half full. A
// size allocated again on the slow path after a block of it was freed here is
// marked recurring (note_allocation): the pool's misses keep those lists and
// flush the others (pool_core_slow.cpp). The slow path's sweeps
// (extract_if_not) rebuild the table without its empty lists when those are
// most of it, so a stream that frees ever new sizes (a growing
// KV cache, random sizes) keeps a table the size of what it caches, and a
// sweep costs that, not one slot per size ever freed. If growing fails for want of
// host memory the block goes to an overflow list instead, so push never
// fails. Not thread-safe: the owning stream's lock guards it.
#pragma once

#include "core/block.hpp"

#include <sova/placement.hpp>

#include <atomic>
#include <cstddef>
#include <memory>
#include <new>

namespace sova::detail {

class SizeBins {
 public:
  SizeBins() { rehash(kInitialSlots); }

  /// The most recently freed block of exactly `size` bytes, or nullptr.
  Block* pop(std::size_t size) noexcept {
    Slot* slot = find(size);
    if (slot == nullptr || slot->head == nullptr) return nullptr;
    Block* block = slot->head;
    slot->head = block->bin_next;
    block->bin_next = nullptr;
    count_out(block);
    return block;
  }

  void push(Block* block) noexcept {
    Slot* slot = find_or_insert(block->size);
    if (slot == nullptr) {
      block->bin_next = overflow_;
      overflow_ = block;
    } else {
      block->bin_next = slot->head;
      slot->head = block;
    }
    bytes_ += block->size;
    if (block->size <= kSmallBlockLimit) small_bytes_ += block->size;
    blocks_.store(blocks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  /// Marks `size` as recurring when the stream has freed a block of that size
  /// before (its key is in the table): called when the slow path hands out a
  /// block of `size`. Sweeps may keep recurring sizes' lists (extract_if_not).
  /// Returns whether it was (the pool's remapping credit depends on it).
  bool note_allocation(std::size_t size) noexcept {
    Slot* slot = find(size);
    if (slot == nullptr) return false;
    slot->recurring = true;
    return true;
  }
  /// Unlinks every block for which keep(block, recurring) is false and hands
  /// it to take(block); `recurring` says whether its size is marked recurring
  /// (note_allocation).
  template <class Keep, class Take>
  void extract_if_not(Keep keep, Take take) {
    auto sweep = [&](Block*& head, bool recurring) {
      Block** link = &head;
      while (*link != nullptr) {
        Block* block = *link;
        if (keep(block, recurring)) {
          link = &block->bin_next;
        } else {
          *link = block->bin_next;
          block->bin_next = nullptr;
          count_out(block);
          take(block);
        }
      }
    };
    std::size_t lists = 0;  // non-empty lists left
    for (std::size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].size == 0) continue;
      sweep(slots_[i].head, slots_[i].recurring);
      if (slots_[i].head != nullptr) ++lists;
    }
    sweep(overflow_, false);
    if (capacity_ > kInitialSlots && lists * 4 < used_) drop_empty_lists(lists);
  }

  template <class Visit>
  void for_each(Visit visit) const {
    for (std::size_t i = 0; i < capacity_; ++i) {
      for (Block* b = slots_[i].head; b != nullptr; b = b->bin_next) visit(b);
    }
    for (Block* b = overflow_; b != nullptr; b = b->bin_next) visit(b);
  }

  std::size_t bytes() const noexcept { return bytes_; }
  /// The part of bytes() in blocks of at most kSmallBlockLimit.
  std::size_t small_bytes() const noexcept { return small_bytes_; }
  /// Slots of the table (tests: that sweeps shrink it).
  std::size_t capacity() const noexcept { return capacity_; }
  /// Blocks held. Written under the owner's lock; may be read without it (a
  /// hint then: the slow path skips streams with nothing cached).
  std::size_t blocks() const noexcept { return blocks_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::size_t size = 0;  // 0 = empty slot
    Block* head = nullptr;
    bool recurring = false;  // note_allocation
  };
  static constexpr std::size_t kInitialSlots = 64;
  void count_out(const Block* block) noexcept {
    bytes_ -= block->size;
    if (block->size <= kSmallBlockLimit) small_bytes_ -= block->size;
    blocks_.store(blocks_.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }

  static std::size_t hash(std::size_t size) noexcept {
    // Sizes are multiples of 512: drop those zero bits, then mix.
    std::size_t h = size / kAlignment;
    h ^= h >> 17;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 29);
  }

  Slot* find(std::size_t size) noexcept {
    for (std::size_t i = hash(size) & (capacity_ - 1);; i = (i + 1) & (capacity_ - 1)) {
      if (slots_[i].size == size) return &slots_[i];
      if (slots_[i].size == 0) return nullptr;
    }
  }

  Slot* find_or_insert(std::size_t size) noexcept {
    if (Slot* slot = find(size)) return slot;
    if ((used_ + 1) * 2 > capacity_) {
      try {
        rehash(capacity_ * 2);
      } catch (const std::bad_alloc&) {
        if (used_ + 1 >= capacity_) return nullptr;  // table full: overflow list
      }
    }
    std::size_t i = hash(size) & (capacity_ - 1);
    while (slots_[i].size != 0) i = (i + 1) & (capacity_ - 1);
    slots_[i].size = size;
    ++used_;
    return &slots_[i];
  }

  /// A table of the smallest capacity that keeps `lists` keys under half
  /// full, holding only the non-empty lists (an empty recurring size's mark
  /// goes too: a table that kept every size that ever recurred made each
  /// sweep cost thousands of slots under random sizes). Best effort: without
  /// host memory the table stays as it is.
  void drop_empty_lists(std::size_t lists) noexcept {
    std::size_t capacity = kInitialSlots;
    while (lists * 2 >= capacity) capacity *= 2;
    try {
      rehash(capacity, /*keep_empty=*/false);
    } catch (const std::bad_alloc&) {
    }
  }
  void rehash(std::size_t capacity, bool keep_empty = true) {
    std::unique_ptr<Slot[]> fresh(new Slot[capacity]);
    std::size_t used = 0;
    for (std::size_t i = 0; i < capacity_; ++i) {
      if (slots_[i].size == 0 || (!keep_empty && slots_[i].head == nullptr)) continue;
      ++used;
      std::size_t j = hash(slots_[i].size) & (capacity - 1);
      while (fresh[j].size != 0) j = (j + 1) & (capacity - 1);
      fresh[j] = slots_[i];
    }
    slots_ = std::move(fresh);
    capacity_ = capacity;
    used_ = used;
  }

  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  Block* overflow_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t small_bytes_ = 0;
  std::atomic<std::size_t> blocks_{0};
};

}  // namespace sova::detail
