// Remapper: moves free physical chunks under the VA of a block that needs
// backing (PoolOptions::remap), instead of creating new ones; releases free
// chunks so that a gap can be created without reserved memory growing; moves
// them back when the block cannot be backed after all.
//
// The unit that moves is a whole chunk: the driver maps a physical allocation
// only whole (cuMemMap with a non-zero offset is CUDA_ERROR_NOT_SUPPORTED and
// cuMemUnmap of part of a mapping CUDA_ERROR_INVALID_VALUE on the H100,
// tools/probe_remap.cu). A chunk may move when it lies wholly inside a free
// block of the heap with no other stream's pending free in it, so no work
// unordered with the new block's can touch its old addresses; the places it
// leaves stay mapped as ghosts (arena/ghost_mappings.hpp).
//
// It owns its working lists, kept between growths so that remapping allocates
// nothing once they have grown. No lock of its own: every member runs under
// the heap lock, which guards the heap and the arena it reads and changes.
// How much it may do is the caller's (GrowthBudget).
#pragma once

#include "arena/arena.hpp"
#include "core/heap.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sova::detail {

class Remapper {
 public:
  /// A chunk moved, and the granule it came from (undo moves it back).
  struct ChunkMove {
    std::int32_t slot;
    std::size_t from_granule;
  };

  Remapper(Arena& arena, const Heap& heap) noexcept : arena_(arena), heap_(heap) {}
  Remapper(const Remapper&) = delete;
  Remapper& operator=(const Remapper&) = delete;

  /// Moves whole chunks lying in free blocks safe for `user` (the allocating
  /// stream: its own pending frees allowed, each move then pinning the place
  /// it leaves) under the unbacked granules of [offset, offset + bytes):
  /// first those with a ghost there (no driver call), then largest first
  /// where they fit; appends each move to `moves`. At most `max_moves` moves
  /// that map anew. Best effort. Returns how many moves mapped anew (what
  /// remapping pays for).
  std::size_t move_free_chunks_into(StreamState* user, std::size_t offset, std::size_t bytes, std::size_t max_moves,
                                    std::vector<ChunkMove>& moves) noexcept;
  /// Releases safe free chunks, at most `max_chunks`, so that `missing` bytes
  /// can be created without reserved memory growing: the smallest chunk that
  /// covers them, else the largest until they are covered. Returns the
  /// chunks released.
  std::size_t release_for_gap(std::size_t missing, std::size_t max_chunks) noexcept;
  /// Moves the chunks of `moves` back, last first (their old places are still free).
  void undo(const std::vector<ChunkMove>& moves) noexcept;

 private:
  /// The chunks lying wholly inside free blocks that no pending free of a
  /// stream other than `user` overlaps (nullptr: of any stream): what may
  /// move for `user` (nullptr: be released), into `out` (cleared first).
  /// Throws std::bad_alloc.
  void safe_free_chunks(const StreamState* user, std::vector<Arena::ChunkRef>& out);
  /// The pin of a move of `chunk` for `user`: the latest epoch of `user`'s
  /// pending frees overlapping where it lies (none: no pin).
  Arena::GhostPin pin_for(StreamState* user, const Arena::ChunkRef& chunk) const noexcept;

  Arena& arena_;
  const Heap& heap_;
  std::vector<Arena::ChunkRef> donor_scratch_;
  std::vector<std::pair<std::size_t, std::size_t>> run_scratch_;
};

}  // namespace sova::detail
