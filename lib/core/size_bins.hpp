// SizeBins: one stream's cache of freed blocks, keyed by exact size.
//
// An open-addressing table from block size to an intrusive LIFO list of the
// blocks of that size (Block::bin_next / bin_prev). pop and push are a hash, a
// short probe and a few pointer writes: the fast path's core (budget ~5 ns
// each). A size allocated again on the slow path after a block of it was
// freed here is marked recurring (note_allocation); the mark stays with the
// size while the pool lives, through rebuilds of the table (dropping it with
// the size's list, as an earlier version did, unmarked exactly the sizes that
// were live at the time, and their next misses flushed them).
//
// Every cached block is also on one of two address-free lists
// (Block::list_prev / list_next): `kept`, blocks of at most kSmallBlockLimit
// of a recurring size, and `loose`, the rest. A miss moves the loose ones to
// the heap and keeps the others (pool_core_slow.cpp says why): take_loose()
// walks only the blocks it takes, never the table, so a miss costs what it
// moves whatever the number of sizes the stream ever freed.
//
// The table doubles when half full; empty slots of sizes never marked are
// dropped when they are most of it after a sweep (a size's key outlives its
// blocks until then: note_allocation's answer depends on it), so a
// stream that frees ever new sizes (a growing KV cache, random sizes) keeps a
// table the size of what it caches and recurs. If growing fails for want of
// host memory the block goes to an overflow list instead (a loose block of no
// slot), so push never fails. Not thread-safe: the owning stream's lock
// guards it.
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
  SizeBins() { rehash(kInitialSlots, /*drop_stale=*/false); }
  SizeBins(const SizeBins&) = delete;
  SizeBins& operator=(const SizeBins&) = delete;

  /// The most recently freed block of exactly `size` bytes, or nullptr.
  Block* pop(std::size_t size) noexcept {
    Slot* slot = find(size);
    if (slot == nullptr || slot->head == nullptr) return nullptr;
    Block* block = slot->head;
    unlink(slot, block);
    return block;
  }

  void push(Block* block) noexcept {
    Slot* slot = find_or_insert(block->size);
    block->bin_prev = nullptr;
    if (slot == nullptr) {
      block->overflowed = true;
      block->bin_next = overflow_;
      if (overflow_ != nullptr) overflow_->bin_prev = block;
      overflow_ = block;
      list_push(loose_, block);
    } else {
      if (slot->head == nullptr && !slot->recurring) ++live_slots_;
      block->bin_next = slot->head;
      if (slot->head != nullptr) slot->head->bin_prev = block;
      slot->head = block;
      list_push(kept_size(*slot) ? kept_ : loose_, block);
    }
    bytes_ += block->size;
    blocks_.store(blocks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  /// Marks `size` as recurring when the stream has freed a block of that size
  /// before (its key is in the table): called when the slow path hands out a
  /// block of `size`. A recurring small size's blocks are kept by
  /// take_loose(). Returns whether it was (the pool's remapping credit
  /// depends on it).
  bool note_allocation(std::size_t size) noexcept {
    Slot* slot = find(size);
    if (slot == nullptr) return false;
    if (!slot->recurring) {
      if (slot->head == nullptr) ++live_slots_;
      slot->recurring = true;
      if (kept_size(*slot)) {
        for (Block* b = slot->head; b != nullptr; b = b->bin_next) {
          list_unlink(loose_, b);
          list_push(kept_, b);
        }
      }
    }
    return true;
  }

  /// Unlinks every block but those kept (small blocks of recurring sizes)
  /// and hands each to take(block). Costs what it takes.
  template <class Take>
  void take_loose(Take take) {
    take_list(loose_, take);
    compact_if_stale();
  }
  /// Unlinks every block and hands each to take(block).
  template <class Take>
  void take_all(Take take) {
    take_list(loose_, take);
    take_list(kept_, take);
    kept_bytes_.store(0, std::memory_order_relaxed);
    compact_if_stale();
  }
  /// Unlinks the kept blocks least recently freed until the kept ones hold at
  /// most `target` bytes, and hands each to take(block). Walks the kept list.
  template <class Take>
  void take_oldest_kept(std::size_t target, Take take) {
    Block* oldest = kept_;
    while (oldest != nullptr && oldest->list_next != nullptr) oldest = oldest->list_next;
    while (oldest != nullptr && kept_bytes() > target) {
      Block* newer = oldest->list_prev;
      unlink(slot_of(oldest), oldest);
      take(oldest);
      oldest = newer;
    }
    compact_if_stale();
  }
  /// Unlinks every block for which keep(block, recurring) is false and hands
  /// it to take(block); `recurring` says whether its size is marked
  /// recurring (note_allocation). Walks every cached block.
  template <class Keep, class Take>
  void extract_if_not(Keep keep, Take take) {
    auto sweep = [&](Block*& head) {
      for (Block* b = head; b != nullptr;) {
        Block* next = b->list_next;
        Slot* slot = slot_of(b);
        if (!keep(b, slot != nullptr && slot->recurring)) {
          unlink(slot, b);
          take(b);
        }
        b = next;
      }
    };
    sweep(loose_);
    sweep(kept_);
    compact_if_stale();
  }

  template <class Visit>
  void for_each(Visit visit) const {
    for (Block* b = loose_; b != nullptr; b = b->list_next) visit(b);
    for (Block* b = kept_; b != nullptr; b = b->list_next) visit(b);
  }

  std::size_t bytes() const noexcept { return bytes_; }
  /// The part of bytes() that take_loose() keeps.
  /// Written under the owner's lock; may be read without it (a hint then:
  /// the slow path's livelock rule, pool_core_slow.cpp).
  std::size_t kept_bytes() const noexcept { return kept_bytes_.load(std::memory_order_relaxed); }
  /// Slots of the table (tests: that stale sizes do not keep it large).
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

  /// Kept: small blocks only. Recurring blocks up to 4 MiB kept too held
  /// 1.5-4% more memory on four of the seven recorded traces (simulation).
  static bool kept_size(const Slot& slot) noexcept { return slot.recurring && slot.size <= kSmallBlockLimit; }

  void list_push(Block*& head, Block* block) noexcept {
    if (&head == &kept_) add_kept(static_cast<std::ptrdiff_t>(block->size));
    block->list_prev = nullptr;
    block->list_next = head;
    if (head != nullptr) head->list_prev = block;
    head = block;
  }
  void list_unlink(Block*& head, Block* block) noexcept {
    if (&head == &kept_) add_kept(-static_cast<std::ptrdiff_t>(block->size));
    if (block->list_prev != nullptr)
      block->list_prev->list_next = block->list_next;
    else
      head = block->list_next;
    if (block->list_next != nullptr) block->list_next->list_prev = block->list_prev;
    block->list_prev = block->list_next = nullptr;
  }

  /// The slot holding `block`'s size; nullptr for an overflow block.
  Slot* slot_of(const Block* block) noexcept { return block->overflowed ? nullptr : find(block->size); }

  /// Removes `block` from its size list (`slot`, nullptr: the overflow list)
  /// and from its loose/kept list, and counts it out.
  void unlink(Slot* slot, Block* block) noexcept {
    Block*& head = slot != nullptr ? slot->head : overflow_;
    if (block->bin_prev != nullptr)
      block->bin_prev->bin_next = block->bin_next;
    else
      head = block->bin_next;
    if (block->bin_next != nullptr) block->bin_next->bin_prev = block->bin_prev;
    block->bin_next = block->bin_prev = nullptr;
    block->overflowed = false;
    if (slot != nullptr && slot->head == nullptr && !slot->recurring) --live_slots_;
    list_unlink(slot != nullptr && kept_size(*slot) ? kept_ : loose_, block);
    count_out(block);
  }

  /// Unlinks every block of `head` and hands each to `take`. Every block of
  /// a size is on the same list, so each size's list is emptied at once.
  template <class Take>
  void take_list(Block*& head, Take take) {
    while (head != nullptr) {
      Block* block = head;
      head = block->list_next;
      if (head != nullptr) head->list_prev = nullptr;
      block->list_prev = block->list_next = nullptr;
      if (block->overflowed) {
        if (block->bin_prev != nullptr)
          block->bin_prev->bin_next = block->bin_next;
        else
          overflow_ = block->bin_next;
        if (block->bin_next != nullptr) block->bin_next->bin_prev = block->bin_prev;
        block->overflowed = false;
      } else if (Slot* slot = find(block->size); slot->head != nullptr) {
        slot->head = nullptr;
        if (!slot->recurring) --live_slots_;
      }
      block->bin_next = block->bin_prev = nullptr;
      count_out(block);
      take(block);
    }
  }

  void count_out(const Block* block) noexcept {
    bytes_ -= block->size;
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
        rehash(capacity_ * 2, /*drop_stale=*/false);
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

  /// After a sweep: when stale sizes are most of a grown table, a table for
  /// what is left (best effort: without host memory the table stays).
  void compact_if_stale() noexcept {
    if (capacity_ <= kInitialSlots || live_slots_ * 4 >= used_) return;
    std::size_t capacity = kInitialSlots;
    while ((live_slots_ + 1) * 4 > capacity) capacity *= 2;
    try {
      rehash(capacity, /*drop_stale=*/true);
    } catch (const std::bad_alloc&) {
    }
  }

  /// Moves every slot into a fresh table of `capacity` slots; with
  /// `drop_stale`, leaves out the empty slots of sizes never marked
  /// recurring. Blocks keep their lists (slots hold only the heads).
  void rehash(std::size_t capacity, bool drop_stale) {
    std::unique_ptr<Slot[]> fresh(new Slot[capacity]);
    std::size_t used = 0;
    for (std::size_t i = 0; i < capacity_; ++i) {
      const Slot& slot = slots_[i];
      if (slot.size == 0 || (drop_stale && slot.head == nullptr && !slot.recurring)) continue;
      ++used;
      std::size_t j = hash(slot.size) & (capacity - 1);
      while (fresh[j].size != 0) j = (j + 1) & (capacity - 1);
      fresh[j] = slot;
    }
    slots_ = std::move(fresh);
    capacity_ = capacity;
    used_ = used;
  }

  std::unique_ptr<Slot[]> slots_;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;        ///< slots with a size
  std::size_t live_slots_ = 0;  ///< slots with blocks or a recurring mark
  Block* overflow_ = nullptr;   ///< blocks of no slot (host memory ran out)
  Block* loose_ = nullptr;      ///< cached blocks a miss takes
  Block* kept_ = nullptr;       ///< small blocks of recurring sizes
  std::size_t bytes_ = 0;
  std::atomic<std::size_t> kept_bytes_{0};
  void add_kept(std::ptrdiff_t delta) noexcept {
    kept_bytes_.store(kept_bytes_.load(std::memory_order_relaxed) + static_cast<std::size_t>(delta),
                      std::memory_order_relaxed);
  }
  std::atomic<std::size_t> blocks_{0};
};

}  // namespace sova::detail
