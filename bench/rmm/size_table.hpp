// sova_bench_rmm — the size of each live block, by pointer: what RMM's
// deallocate needs and the benchmark shape does not pass.
//
// RMM's resources take the size back when freeing (deallocate(stream, ptr,
// bytes, alignment)): pool_memory_resource rebuilds the block from it, binning
// picks the bin by it, the arena the superblock. The shape of
// ../allocators.hpp frees by pointer alone, as cudaFreeAsync and sova do, so
// the RMM peers remember what they handed out. A real RMM caller knows its
// sizes (rmm::device_buffer keeps one), so this table is the benchmark's cost,
// not RMM's, and is kept cheap: open addressing with linear probing and
// backward-shift deletion, no allocation unless it grows, one table per
// thread (no lock). docs/benchmarks.md gives its cost per pair.
//
// Contract: a block is freed by the thread that allocated it (true of every
// workload here: pair/, threads/, burst/, multistream/, random/). take() of a
// pointer this thread's table does not hold throws, so a breach fails the
// case instead of freeing a wrong size.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace sova_bench {

class SizeTable {
 public:
  /// Records that `ptr` (not null, not already held) was allocated with `bytes`.
  void put(void* ptr, std::size_t bytes) {
    if (2 * (used_ + 1) > slots_.size()) grow();
    insert(key_of(ptr), bytes);
    ++used_;
  }

  /// Forgets `ptr` and returns its bytes; throws std::runtime_error when this
  /// thread's table does not hold it.
  std::size_t take(void* ptr) {
    const std::uintptr_t key = key_of(ptr);
    std::size_t i = home(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) {
        throw std::runtime_error("sova_bench_rmm: freeing a pointer this thread did not allocate (size unknown)");
      }
      i = (i + 1) & mask();
    }
    const std::size_t bytes = slots_[i].bytes;
    erase_at(i);
    --used_;
    return bytes;
  }

 private:
  struct Slot {
    std::uintptr_t key = 0;  // 0: empty
    std::size_t bytes = 0;
  };

  static std::uintptr_t key_of(void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); }
  std::size_t mask() const { return slots_.size() - 1; }
  // Fibonacci hashing: the top bits of key * 2^64/phi (pointers are 256-byte
  // aligned, so the low bits alone would crowd).
  std::size_t home(std::uintptr_t key) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void insert(std::uintptr_t key, std::size_t bytes) {
    std::size_t i = home(key);
    while (slots_[i].key != 0) i = (i + 1) & mask();
    slots_[i] = {key, bytes};
  }

  // Empties slot i and moves later entries of the probe run back into the
  // hole where their home allows, so that no lookup meets a false empty.
  void erase_at(std::size_t i) {
    std::size_t j = i;
    for (;;) {
      j = (j + 1) & mask();
      if (slots_[j].key == 0) break;
      const std::size_t h = home(slots_[j].key);
      // Entry j may move to i when i lies on its probe path [h, j].
      if (((j - h) & mask()) >= ((j - i) & mask())) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{};
  }

  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    shift_ = 64 - std::countr_zero(slots_.size());
    for (const Slot& s : old) {
      if (s.key != 0) insert(s.key, s.bytes);
    }
  }

  static constexpr std::size_t kInitialSlots = 1024;  // a power of two
  std::vector<Slot> slots_ = std::vector<Slot>(kInitialSlots);
  int shift_ = 64 - std::countr_zero(kInitialSlots);
  std::size_t used_ = 0;
};

}  // namespace sova_bench
