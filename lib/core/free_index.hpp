// FreeIndex: every free block of a pool's heap, ordered by size then address
// (best fit: the first block of at least a size is the smallest that fits,
// the lowest of those), with the largest at the end.
//
// A std::set whose nodes come from a NodeCache: once the set has held as many
// blocks as it ever will, inserts and erases (every flush, carve and
// coalesce of the slow path) allocate nothing. Guarded by the heap lock.
#pragma once

#include "core/block.hpp"
#include "core/node_cache.hpp"

#include <cstddef>
#include <set>

namespace sova::detail {

class FreeIndex {
  using Set = std::set<Block*, BySizeThenOffset, RecyclingAllocator<Block*>>;

 public:
  using const_iterator = Set::const_iterator;
  using const_reverse_iterator = Set::const_reverse_iterator;

  FreeIndex() : set_(BySizeThenOffset{}, RecyclingAllocator<Block*>(&nodes_)) {}
  FreeIndex(const FreeIndex&) = delete;
  FreeIndex& operator=(const FreeIndex&) = delete;

  /// Throws std::bad_alloc when the node cache is empty and the system has no memory.
  void insert(Block* block) { set_.insert(block); }
  /// Keys are unique (size, then offset): one descent with find, where
  /// erase(key) descends twice for the equal range (3.8% of a replay's host
  /// time on the simulation, perf).
  void erase(Block* block) noexcept {
    const auto it = set_.find(block);
    if (it != set_.end()) set_.erase(it);
  }
  bool contains(Block* block) const noexcept { return set_.find(block) != set_.end(); }
  std::size_t size() const noexcept { return set_.size(); }

  /// The best-fit candidates for `size` bytes, smallest first.
  const_iterator lower_bound(std::size_t size) const noexcept { return set_.lower_bound(size); }
  const_iterator begin() const noexcept { return set_.begin(); }
  const_iterator end() const noexcept { return set_.end(); }
  /// Largest first.
  const_reverse_iterator rbegin() const noexcept { return set_.rbegin(); }
  const_reverse_iterator rend() const noexcept { return set_.rend(); }

 private:
  NodeCache nodes_;  // before set_: outlives it
  Set set_;
};

}  // namespace sova::detail
