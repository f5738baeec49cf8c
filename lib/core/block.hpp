// Block: one VA range of a pool, live, cached in a stream, or free in the heap.
//
// Every byte of a pool's VA belongs to exactly one block; blocks are linked in
// address order (prev/next) so that free neighbours can be coalesced.
//
// Who may change what (the locking contract):
//   live <-> cached   under the lock of the stream whose cache holds it
//   cached -> free    under the heap lock and that stream's lock
//   free -> live      under the heap lock
//   offset/size/prev/next, split and merge: under the heap lock, free blocks only
// `state` is atomic so that a double free racing with another free is caught
// by a compare-exchange instead of corrupting a cache.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sova::detail {

/// Every block starts and ends on this boundary (the runtime's pool hands out
/// 512-byte aligned pointers too, measured).
inline constexpr std::size_t kAlignment = 512;

inline constexpr std::size_t round_up_to_alignment(std::size_t bytes) noexcept {
  return (bytes + kAlignment - 1) & ~(kAlignment - 1);
}

enum class BlockState : std::uint8_t {
  live,    ///< handed to the user
  cached,  ///< freed, in a stream's exact-size cache
  free,    ///< in the heap (frees not yet complete: the freeing stream's PendingRanges)
};

struct StreamState;

struct Block {
  std::size_t offset = 0;     ///< from the arena's base
  std::size_t size = 0;       ///< a multiple of kAlignment
  std::size_t requested = 0;  ///< bytes the user asked for (live blocks)
  /// Live and cached blocks: bytes from the start known backed (at least what
  /// the request needed; policies may back less than the whole block).
  std::size_t backed = 0;
  Block* prev = nullptr;  ///< address-order neighbours
  Block* next = nullptr;
  Block* bin_next = nullptr;  ///< next in a stream cache bin (and in other single lists of the slow path)
  /// Cached blocks (SizeBins): previous in the size's bin, and the loose or
  /// kept list (size_bins.hpp).
  Block* bin_prev = nullptr;
  Block* list_prev = nullptr;
  Block* list_next = nullptr;
  /// cached: the stream whose cache holds it. free: nullptr (what is pending
  /// is in the heap's pending ranges of the freeing stream, not on the block).
  StreamState* stream = nullptr;
  /// Live blocks: the stream state that allocated it. A free on another
  /// stream is "foreign": such frees are fenced sooner (stream_caches.hpp, kForeignFenceEvery).
  StreamState* allocated_on = nullptr;
  /// The freeing stream's epoch at the free: the free is complete once that
  /// stream's safe epoch reaches this number.
  std::uint64_t epoch = 0;
  /// Free blocks in the heap: neighbours in their FreeIndex class's list
  /// (free_index.hpp), and whether the block is in the index.
  Block* free_prev = nullptr;
  Block* free_next = nullptr;
  bool in_free_index = false;
  std::atomic<BlockState> state{BlockState::free};
  bool overflowed = false;  ///< cached in SizeBins' overflow list (host memory ran out)
  /// Live blocks taken as CUDA graph memory (PoolGraphs::take): their free is
  /// GraphMemory's to judge first. A flag on the block, so that no other free
  /// looks in the graphs' table; cleared at the block's ordinary free.
  std::atomic<bool> graph_memory{false};
};

/// Orders free blocks by size, then address: the heap's best-fit sets.
struct BySizeThenOffset {
  using is_transparent = void;
  bool operator()(const Block* a, const Block* b) const noexcept {
    return a->size != b->size ? a->size < b->size : a->offset < b->offset;
  }
  bool operator()(const Block* a, std::size_t size) const noexcept { return a->size < size; }
  bool operator()(std::size_t size, const Block* b) const noexcept { return size < b->size; }
};

}  // namespace sova::detail
