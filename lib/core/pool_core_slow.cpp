// The slow path: the ladder from the heap to out-of-memory (pool_core.hpp
// lists the steps). Runs with the heap lock held; what moves between the
// stream caches and the heap is StreamCaches', which takes stream locks
// inside it, never the other way round.
#include "core/pool_core.hpp"

#include "core/clock.hpp"

#include <algorithm>

namespace sova::detail {

cudaError_t PoolCore::allocate_slow(void** ptr, std::size_t bytes, std::size_t size, std::size_t need,
                                    StreamState* state, cudaStream_t stream) noexcept {
  thread_local std::uint32_t t_slow_calls = 0;
  const std::int64_t start = (t_slow_calls++ % kSlowTimingEvery) == 0 ? now_ns() : 0;
  caches_.prepare_miss(state, stream);
  std::unique_lock<HeapMutex> lock(heap_.mutex());
  bool synchronized = false;
  bool collected = false;
  for (;;) {
    SlowStep step = SlowStep::heap;
    Block* block = find_without_growth(size, need, state, &step);
    // Internal dependencies come after growth: a wait ties this stream to
    // another's running work (the serialization of rmm#850), growth costs once.
    // Unless the pool already holds more free memory than is in use (at least
    // 64 MiB): then growing again would only add to memory other streams'
    // unfinished frees hold, without bound where one stream frees what
    // another allocates, and waiting comes first.
    const bool internal = reuse_allow_internal_dependencies_.load(std::memory_order_relaxed);
    bool waited = false;
    if (block == nullptr && internal &&
        GrowthBudget::holds_too_much_free(arena_.backed_bytes(), caches_.live_bytes())) {
      block = take_with_wait(size, need, state, stream);
      waited = true;
      step = SlowStep::wait;
    }
    if (block == nullptr) {
      const cudaError_t error = grow(size, need, state, stream, &block);
      // cudaErrorNotReady: a ghost mapping in the way whose owner's frees
      // could not be completed now (its wait refused while a capture runs):
      // memory not available, as out of memory is; the ladder goes on.
      if (error != cudaSuccess && error != cudaErrorMemoryAllocation && error != cudaErrorNotReady) {
        ++stats_.failed_allocations;
        return error;
      }
      step = SlowStep::grown;
    }
    if (block == nullptr && internal && !waited) {
      block = take_with_wait(size, need, state, stream);
      step = SlowStep::wait;
    }
    if (block != nullptr) {
      hand_out(block, bytes, state, step == SlowStep::grown);
      *ptr = reinterpret_cast<void*>(arena_.base() + block->offset);
      if (synchronized) step = SlowStep::after_synchronize;
      stats_.served(step, start != 0 ? static_cast<std::uint64_t>(now_ns() - start) : 0);
      return cudaSuccess;
    }
    // A graph released since allocate() looked (its release callback may run
    // as step 6's synchronize completes its last launch): its memory back to
    // the heap, outside the heap lock (collect frees into the pool), and the
    // ladder once more.
    if (!collected && graphs_.memory().has_released()) {
      lock.unlock();
      graphs_.memory().collect();
      lock.lock();
      collected = true;
      continue;
    }
    // Step 6: frees not known complete may be holding what we need.
    if (synchronized || !caches_.holds_frees()) break;
    if (caches_.synchronize_all()) ++stats_.device_synchronizes;
    synchronized = true;
  }
  ++stats_.failed_allocations;
  return cudaErrorMemoryAllocation;
}

Block* PoolCore::find_without_growth(std::size_t size, std::size_t need, StreamState* state, SlowStep* step) noexcept {
  auto take_if_backed = [&](Fit fit) {
    return fit.block != nullptr && arena_.is_backed(fit.at, need) ? heap_.carve(fit, size) : nullptr;
  };
  // 1. The best fit over the free VA this stream may use (docs/design.md, "A
  //    stable layout"), after the stream's cache is flushed into the heap,
  //    coalesced, so that the fit sees every free range it could take: the
  //    placements then repeat pass after pass. Kept back: the cached small
  //    blocks of recurring sizes (SizeBins::note_allocation), while they hold
  //    at most kKeptSmallCacheBytes. Without that, a loop cycling through a
  //    few small sizes missed on every allocation, each miss flushing the
  //    block the next one wanted. They are flushed too when the fit would grow.
  caches_.flush_own(state);
  *step = SlowStep::heap;
  const Fit fit = heap_.best_fit(state, size);
  if (Block* block = take_if_backed(fit)) return block;
  // The fit needs new memory. The kept blocks go to the heap too, so that
  // it may use them instead — unless other streams share the pool (or it is
  // small, keeps_small_caches) and growing is within the budget: then the
  // stream keeps them. Without that,
  // threads that each cycle through a few small sizes, whose blocks did not
  // fit beside the other threads' in backed memory, flushed their kept
  // blocks on every miss, found room among them, never grew, and missed
  // again at the next allocation (16 threads at 12 M pairs/s).
  // With one stream in a large pool, growing instead cost a trace 0.3% more
  // memory (encoder_amp_train 1.009x -> 1.012x on the simulation) for
  // nothing; in a small one a granule, and one stream of threads_mixed's 64
  // sizes missed 10% of allocations instead of 24%.
  const bool keep_kept = fit.block != nullptr && caches_.keeps_kept_blocks(state) && within_growth_budget(fit.at, need);
  if (!keep_kept && caches_.flush_all_own(state)) {
    *step = SlowStep::heap_all;
    if (Block* block = take_if_backed(heap_.best_fit(state, size))) return block;
  }
  // 2. Opportunistic: other streams' frees known complete — their loose
  //    blocks first, and their kept ones only where growing would exceed the
  //    budget. Taking every stream's kept blocks on any miss that needed a
  //    new granule emptied their caches, and each then missed on its next
  //    allocations and took the others' in turn (16 streams of 16 size
  //    classes, interleaved on the simulation: 2-21% of allocations missed;
  //    0.1% this way, for 10 MiB more, within the budget).
  if (reuse_allow_opportunistic_.load(std::memory_order_relaxed)) {
    for (const bool kept_too : {false, true}) {
      caches_.harvest(state, kept_too);
      const Fit other_fit = heap_.best_fit(state, size);
      if (Block* block = take_if_backed(other_fit)) {
        ++stats_.cross_stream_reuses;
        *step = SlowStep::other_streams;
        return block;
      }
      if (!kept_too && other_fit.block != nullptr && within_growth_budget(other_fit.at, need)) return nullptr;
    }
  }
  return nullptr;
}

Block* PoolCore::take_with_wait(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream) noexcept {
  Block* block = caches_.take_fenced(state, stream, size, need);
  if (block != nullptr) {
    ++stats_.cross_stream_waits;
    ++stats_.cross_stream_reuses;
  }
  return block;
}

void PoolCore::hand_out(Block* block, std::size_t bytes, StreamState* state, bool grown) noexcept {
  block->requested = bytes;
  block->backed = arena_.backed_prefix(block->offset, block->size);
  block->allocated_on = state;
  block->stream = nullptr;
  block->bin_next = nullptr;
  block->state.store(BlockState::live, std::memory_order_release);
  budget_.earn(caches_.count_slow_allocation(state, bytes, block->size));
  // The used high-water mark: a walk over every stream state, so once in
  // kUsedSampleEvery slow-path allocations per thread (and at every growth,
  // where the growth budget reads it). Sampling on every one cost 10 us a
  // miss on the H100 once a pool had seen a few hundred short-lived streams
  // (threads_mixed; docs/design.md, "Tuning constants").
  thread_local std::uint32_t t_hand_outs = 0;
  if (grown || (t_hand_outs++ % kUsedSampleEvery) == 0) caches_.sample_used_high();
}

}  // namespace sova::detail
