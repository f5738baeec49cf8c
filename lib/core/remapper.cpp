// Remapper (remapper.hpp): moving free chunks under a block, releasing them
// for a gap, undoing moves. Runs under the heap lock.
#include "core/remapper.hpp"

#include <algorithm>

namespace sova::detail {

void Remapper::safe_free_chunks(const StreamState* user, std::vector<Arena::ChunkRef>& chunks) {
  chunks.clear();
  // Only blocks of a granule or more can hold a whole chunk: the index is by
  // size, so the many small free blocks are skipped without a look.
  for (auto it = heap_.free_blocks().lower_bound(arena_.granularity()); it != heap_.free_blocks().end(); ++it) {
    const Block* free_block = *it;
    // Not from a block with another stream's pending free in it: work there
    // may still read its chunks, unordered with `user`'s.
    if (heap_.pending_elsewhere(user, free_block->offset, free_block->size)) continue;
    arena_.chunks_within(free_block->offset, free_block->size, chunks);
  }
}

Arena::GhostPin Remapper::pin_for(StreamState* user, const Arena::ChunkRef& chunk) const noexcept {
  const std::size_t g = arena_.granularity();
  const std::uint64_t epoch =
      heap_.latest_pending(user, chunk.first_granule * g, chunk.granules * g);
  return epoch == 0 ? Arena::GhostPin{} : Arena::GhostPin{user, epoch};
}

std::size_t Remapper::move_free_chunks_into(StreamState* user, std::size_t offset, std::size_t bytes,
                                            std::size_t max_moves, std::vector<ChunkMove>& moves) noexcept {
  if (max_moves == 0) return 0;  // before the scans below, which cost more than the miss itself
  std::size_t mapped_moves = 0;
  try {
    std::vector<std::pair<std::size_t, std::size_t>>& runs = run_scratch_;
    arena_.unbacked_runs(offset, bytes, runs);
    if (runs.empty()) return 0;
    // Chunks holding `user`'s own pending frees may move too: the block is
    // `user`'s, so its work there runs after what those frees wait for, and
    // the old place stays mapped (a pinned ghost) until that is done.
    std::vector<Arena::ChunkRef>& donors = donor_scratch_;
    safe_free_chunks(user, donors);
    if (donors.empty()) return 0;
    moves.reserve(moves.size() + donors.size());  // recording a move below cannot throw
    // Chunks that were mapped here before (a ghost): moving them back costs
    // no driver call, so they go first, and cost no move.
    bool ghost_moved = false;
    for (Arena::ChunkRef& donor : donors) {
      for (const auto& [granule, count] : runs) {
        const std::size_t home = arena_.ghost_within(donor.slot, granule, count);
        if (home == Arena::kNoGhost) continue;
        const Arena::GhostPin pin = pin_for(user, donor);
        if (arena_.move_chunk(donor.slot, home, /*with_access=*/false, nullptr, &pin) == cudaSuccess) {
          moves.push_back(ChunkMove{donor.slot, donor.first_granule});
          donor.slot = -1;
          ghost_moved = true;
        }
        break;
      }
    }
    if (ghost_moved) {
      arena_.unbacked_runs(offset, bytes, runs);
      if (runs.empty()) return mapped_moves;  // all back where they were mapped: no sort, no scan
    }
    // Largest first: fewest moves, and small chunks left for the gaps. Among
    // chunks of a size, the highest address first: the best fit places
    // blocks low, so the free memory there is what the next blocks land on.
    // Taking the lowest chunk (as sova did before) unbacked exactly the place
    // the next block took, which then took the next chunk up, and so on: a
    // decoder's KV cache, thorough, moved 731 chunks a pass in such chains,
    // 180 this way, at the same memory.
    std::sort(donors.begin(), donors.end(), [](const Arena::ChunkRef& a, const Arena::ChunkRef& b) {
      return a.granules != b.granules ? a.granules > b.granules : a.first_granule > b.first_granule;
    });
    std::size_t next_donor = 0;
    for (auto [granule, count] : runs) {
      // Moved chunks fill the run from its start; access is granted once for
      // all of them (the grant's cost is per mapping either way, ~20-45 us on
      // the H100: docs/design.md, "Chunks").
      const std::size_t run_start = granule;
      const std::size_t moves_before = moves.size();
      bool any_mapped = false;
      // Donors are sorted by size: skip those too large for what is left.
      for (std::size_t i = next_donor; i < donors.size() && count != 0 && mapped_moves < max_moves; ++i) {
        Arena::ChunkRef& donor = donors[i];
        if (donor.slot < 0 || donor.granules > count) continue;
        const std::int32_t slot = donor.slot;
        donor.slot = -1;  // used, moved or lost
        if (i == next_donor) ++next_donor;
        bool mapped = false;
        const Arena::GhostPin pin = pin_for(user, donor);
        if (arena_.move_chunk(slot, granule, /*with_access=*/false, &mapped, &pin) != cudaSuccess)
          continue;  // unchanged
        moves.push_back(ChunkMove{slot, donor.first_granule});
        if (mapped) {
          ++mapped_moves;
          any_mapped = true;
        }
        granule += donor.granules;
        count -= donor.granules;
      }
      if (any_mapped && arena_.grant_access(run_start, granule - run_start) != cudaSuccess) {
        // Not usable here: move this run's chunks back (with access).
        const std::vector<ChunkMove> failed(moves.begin() + static_cast<std::ptrdiff_t>(moves_before), moves.end());
        moves.resize(moves_before);
        undo(failed);
      }
    }
  } catch (const std::bad_alloc&) {
    // Remapping is an optimisation: without host memory for its lists the
    // block is backed with new chunks instead.
  }
  return mapped_moves;
}

std::size_t Remapper::release_for_gap(std::size_t missing, std::size_t max_chunks) noexcept {
  if (max_chunks == 0) return 0;
  std::vector<Arena::ChunkRef>& chunks = donor_scratch_;  // not in use: remapping is done by now
  try {
    safe_free_chunks(nullptr, chunks);  // released: unmapped at once
  } catch (const std::bad_alloc&) {
    return 0;  // an optimisation: the gap is created instead
  }
  const std::size_t granularity = arena_.granularity();
  std::sort(chunks.begin(), chunks.end(),
            [](const Arena::ChunkRef& a, const Arena::ChunkRef& b) { return a.granules < b.granules; });
  // The smallest chunk that covers the gap alone: releasing a larger one
  // would trade a big chunk for small ones, and chunks that only get smaller
  // make every later remap move more of them.
  const auto covering = std::find_if(chunks.begin(), chunks.end(),
                                     [&](const Arena::ChunkRef& c) { return c.granules * granularity >= missing; });
  if (covering != chunks.end()) {
    arena_.release_chunk(covering->slot);
    return 1;
  }
  // None does alone: the largest first, until the gap is covered.
  std::size_t released_bytes = 0;
  std::size_t released = 0;
  for (auto it = chunks.rbegin(); it != chunks.rend() && released_bytes < missing && released < max_chunks; ++it) {
    released_bytes += arena_.release_chunk(it->slot);
    ++released;
  }
  return released;
}

void Remapper::undo(const std::vector<ChunkMove>& moves) noexcept {
  for (auto it = moves.rbegin(); it != moves.rend(); ++it) {
    // Each chunk's old place is its newest ghost: the move back makes no
    // driver call. A failed one leaves the chunk where it is (free memory of
    // the failed block): nothing is lost or mapped twice.
    arena_.move_chunk(it->slot, it->from_granule);
  }
}

}  // namespace sova::detail
