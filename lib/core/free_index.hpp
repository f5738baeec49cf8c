// FreeIndex: every free block of a pool's heap, ordered by size then address
// (best fit: the first block of at least a size is the smallest that fits,
// the lowest of those), with the largest at the end.
//
// A segregated index (TLSF's two-level size classes and bitmaps), intrusive
// (the links live in the Block), that keeps the exact order a std::set by
// (size, offset) had, so that every best fit, and with it every placement,
// is what it was:
//   * sizes map to classes: one per size below 16 x 512 B, then 16 per power
//     of two (each spanning 1/16 of its octave);
//   * each class is a list sorted by (size, offset); a bitmap, and a summary
//     of its words, finds the next non-empty class in a few instructions;
//   * insert walks its class's list (from the tail when the block goes last,
//     the common case), erase unlinks: no node allocation, no rebalancing.
// With the std::set each insert and erase was a tree descent and rebalance
// over nodes spread in memory: a quarter of a training replay's slow path
// (perf and callgrind, vit_train).
// A class holds blocks within 6% of one another in size; many free blocks of
// nearly one size make its walks longer (the cost is then linear in them,
// where the set's was logarithmic).
// Guarded by the heap lock.
#pragma once

#include "core/block.hpp"

#include <array>
#include <cstddef>
#include <cstdint>

namespace sova::detail {

class FreeIndex {
 public:
  /// Sizes are multiples of kAlignment; below kLinearUnits units (of
  /// kAlignment) each has its own class, above each octave has kSubClasses.
  static constexpr std::size_t kSubClassBits = 4;
  static constexpr std::size_t kSubClasses = std::size_t{1} << kSubClassBits;
  static constexpr std::size_t kLinearUnits = kSubClasses;
  static constexpr std::size_t kClasses = kLinearUnits + (64 - kSubClassBits) * kSubClasses;
  static constexpr std::size_t kWords = (kClasses + 63) / 64;

  /// The class of a block of `size` bytes (a multiple of kAlignment, > 0).
  static std::size_t class_of(std::size_t size) noexcept;

  /// Walks the index in its order (kLargestFirst: backwards, largest first):
  /// along a class's list, then on to the next non-empty class.
  template <bool kLargestFirst>
  class Iterator {
   public:
    Iterator() = default;
    Block* operator*() const noexcept { return block_; }
    Iterator& operator++() noexcept {
      Block* along = kLargestFirst ? block_->free_prev : block_->free_next;
      if (along == nullptr) {
        const std::size_t klass = class_of(block_->size);
        along = kLargestFirst ? index_->last_before(klass) : index_->first_after(klass);
      }
      block_ = along;
      return *this;
    }
    bool operator==(const Iterator& other) const noexcept { return block_ == other.block_; }
    bool operator!=(const Iterator& other) const noexcept { return block_ != other.block_; }

   private:
    friend class FreeIndex;
    Iterator(const FreeIndex* index, Block* block) noexcept : index_(index), block_(block) {}
    const FreeIndex* index_ = nullptr;
    Block* block_ = nullptr;  ///< nullptr: the end
  };
  using const_iterator = Iterator<false>;
  using const_reverse_iterator = Iterator<true>;  ///< largest first

  FreeIndex() = default;
  FreeIndex(const FreeIndex&) = delete;
  FreeIndex& operator=(const FreeIndex&) = delete;

  /// Adds a block that is not in the index (its size and offset must not
  /// change while it is in).
  void insert(Block* block) noexcept;
  /// Removes `block`; nothing when it is not in the index.
  void erase(Block* block) noexcept;
  bool contains(const Block* block) const noexcept { return block->in_free_index; }
  std::size_t size() const noexcept { return count_; }

  /// The best-fit candidates for `size` bytes, smallest first.
  const_iterator lower_bound(std::size_t size) const noexcept;
  const_iterator begin() const noexcept { return {this, first_after_or_at(0)}; }
  const_iterator end() const noexcept { return {this, nullptr}; }
  const_reverse_iterator rbegin() const noexcept { return {this, last_before(kClasses)}; }
  const_reverse_iterator rend() const noexcept { return {this, nullptr}; }

 private:
  struct List {
    Block* head = nullptr;
    Block* tail = nullptr;
  };
  /// The first block of the first non-empty class at or after `klass`
  /// (nullptr: none), and of the first after it.
  Block* first_after_or_at(std::size_t klass) const noexcept;
  Block* first_after(std::size_t klass) const noexcept { return first_after_or_at(klass + 1); }
  /// The last block of the last non-empty class before `klass`.
  Block* last_before(std::size_t klass) const noexcept;

  std::array<List, kClasses> lists_{};
  std::array<std::uint64_t, kWords> bits_{};  ///< bit c: class c is not empty
  std::uint64_t summary_ = 0;                 ///< bit w: bits_[w] is not 0
  std::size_t count_ = 0;
  static_assert(kWords <= 64, "the summary is one word");
};

}  // namespace sova::detail
