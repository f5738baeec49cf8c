// The ladder's growth step: backing a carved block, within the growth budget
// or beyond it by remapping free chunks first (pool_core.hpp). Runs with the
// heap lock held.
#include "core/pool_core.hpp"

#include <algorithm>

namespace sova::detail {

cudaError_t PoolCore::grow(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream,
                           Block** out) noexcept {
  const Fit fit = heap_.best_fit(state, size);
  Block* block = fit.block != nullptr ? heap_.carve(fit, size) : nullptr;
  if (block == nullptr) return cudaErrorMemoryAllocation;
  const cudaError_t error = back_block(block, need, state, stream);
  if (error != cudaSuccess) {
    heap_.insert_free(block);
    return error;
  }
  pin_ahead_.note_reserved(arena_.backed_bytes());  // one load unless pin-ahead is on and this is a new high
  *out = block;
  return cudaSuccess;
}

cudaError_t PoolCore::back_block(Block* block, std::size_t need, StreamState* state, cudaStream_t stream) noexcept {
  std::vector<Remapper::ChunkMove> moves;
  if (remap_ && !within_growth_budget(block->offset, need)) {
    cover_from_free_memory(block->offset, need, state, stream, moves);
  }
  const std::size_t chunk_limit = budget_.chunk_limit_for(need);
  cudaError_t error = arena_.commit(block->offset, need, chunk_limit);
  if (error == cudaErrorMemoryAllocation) {
    // Step 6: make room by releasing free physical memory that is safe
    // (whole chunks: a larger free chunk makes room for a smaller gap).
    std::size_t released = release_at_least(arena_.unbacked_bytes_in(block->offset, need));
    // The block has left the heap, so a free chunk straddling one of its ends
    // lies wholly inside no free block and release_at_least cannot see it,
    // though all of it is free: release it too, unless work may
    // still use it or it was just moved here (Remapper::undo needs it).
    const Block* from = block->prev != nullptr && block->prev->state.load() == BlockState::free ? block->prev : block;
    const Block* to = block->next != nullptr && block->next->state.load() == BlockState::free ? block->next : block;
    const std::size_t start = from->offset, end = to->offset + to->size, g = arena_.granularity();
    std::vector<Arena::ChunkRef> chunks;
    try {
      if (!heap_.pending_elsewhere(nullptr, start, end - start)) arena_.chunks_within(start, end - start, chunks);
    } catch (const std::bad_alloc&) {
    }
    for (const Arena::ChunkRef& c : chunks) {
      const std::size_t c_start = c.first_granule * g, c_end = c_start + c.granules * g;
      const bool straddles = c_start < block->offset + block->size && c_end > block->offset &&
                             (c_start < block->offset || c_end > block->offset + block->size);
      const auto moved = [&](const Remapper::ChunkMove& m) { return m.slot == c.slot; };
      if (straddles && std::none_of(moves.begin(), moves.end(), moved)) released += arena_.release_chunk(c.slot);
    }
    if (released != 0) error = arena_.commit(block->offset, need, chunk_limit);
  }
  // Moved chunks go back: left here they could strand physical memory in a
  // range that a later, smaller request cannot use whole.
  if (error != cudaSuccess) remapper_.undo(moves);
  return error;
}

void PoolCore::cover_from_free_memory(std::size_t offset, std::size_t need, StreamState* state, cudaStream_t stream,
                                      std::vector<Remapper::ChunkMove>& moves) noexcept {
  std::size_t max_moves = 0;
  try {
    max_moves = GrowthBudget::max_moves(arena_.chunks_to_create(offset, need, budget_.chunk_limit_for(need)));
  } catch (const std::bad_alloc&) {
    return;  // no host memory for the lists either: the block is created
  }
  auto move_free_chunks = [&] {
    const std::size_t moved =
        remapper_.move_free_chunks_into(state, offset, need, std::min(max_moves, budget_.units_left()), moves);
    max_moves -= moved;
    budget_.spend(moved);
  };
  // Chunks under this stream's own recent frees may move, their old places
  // pinned until those frees complete (docs/design.md, "Pinned ghosts"). A
  // fence over them now (this is the stream's own call: its handle is valid)
  // lets a pin settle later by a poll, or by waiting for this stream alone,
  // instead of a device synchronize.
  caches_.fence_own_pending(state, stream);
  move_free_chunks();
  // The wait helps step 3 too (released chunks must be safe), so it does not
  // depend on moves being left: without it, a block that had used its moves
  // found every other free chunk under its own stream's recent frees and grew.
  if (arena_.unbacked_bytes_in(offset, need) != 0 && budget_.units_left() > 1 &&
      heap_.pending_bytes(state) >= arena_.granularity()) {
    budget_.spend(1);
    if (caches_.wait_for_own_frees(state, stream)) ++stats_.remap_waits;
    if (max_moves != 0) move_free_chunks();
  }
  if (const std::size_t missing = arena_.unbacked_bytes_in(offset, need); missing != 0) {
    budget_.spend(remapper_.release_for_gap(missing, budget_.units_left()));
  }
}

bool PoolCore::within_growth_budget(std::size_t offset, std::size_t need) noexcept {
  const std::uint64_t live_peak =
      std::max<std::uint64_t>(caches_.used_high(), caches_.live_bytes() + need);
  return GrowthBudget::allows(arena_.backed_bytes(), caches_.stranded(), arena_.unbacked_bytes_in(offset, need),
                              live_peak, arena_.granularity(), caches_.active());
}

bool PoolCore::settle_ghost(const Arena::GhostPin& pin) noexcept {
  // Made complete by a poll, a wait for the fence that covers the pin's
  // frees, or a device synchronize (counted as a remapping wait).
  bool waited = false;
  const bool settled =
      caches_.complete_through(static_cast<StreamState*>(const_cast<void*>(pin.owner)), pin.epoch, &waited);
  if (waited) ++stats_.remap_waits;
  return settled;
}

}  // namespace sova::detail
