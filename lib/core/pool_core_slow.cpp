// The slow path: the ladder from the heap to out-of-memory (pool_core.hpp
// lists the steps). Runs with heap_mutex_ held; stream locks are taken
// inside it, never the other way round.
#include "core/pool_core.hpp"

#include "core/clock.hpp"

#include <algorithm>

namespace sova::detail {

namespace {
// refresh_own_fences reads the clock on every (kMissClockEvery + 1)th miss
// (docs/design.md, "Tuning constants").
constexpr std::uint32_t kMissClockEvery = 7;

// Detaches the blocks `cache` holds for which `complete(block)` is true and
// returns them as a list linked through bin_next.
template <class Predicate>
Block* detach(SizeBins& cache, Predicate complete) {
  Block* list = nullptr;
  cache.extract_if_not([&](Block* b, bool recurring) { return !complete(b, recurring); },
                       [&](Block* b) {
                         b->bin_next = list;
                         list = b;
                       });
  return list;
}
}  // namespace

cudaError_t PoolCore::allocate_slow(void** ptr, std::size_t bytes, std::size_t size, std::size_t need,
                                    StreamState* state, cudaStream_t stream) noexcept {
  thread_local std::uint32_t t_slow_calls = 0;
  const std::int64_t start = (t_slow_calls++ % kSlowTimingEvery) == 0 ? now_ns() : 0;
  refresh_own_fences(state, stream);
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
        GrowthBudget::holds_too_much_free(arena_.backed_bytes(), streams_.live_bytes())) {
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
    if (synchronized || !frees_held_anywhere()) break;
    synchronize_everything();
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
  if (state->cache.blocks() != 0 || !state->pending.empty()) {
    flush_cache_to_heap(state, CacheFlush::all_but_recurring_small);
  }
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
  // kept_bytes() without the stream's lock: a hint (other threads freeing on
  // this stream may change it), as blocks() is.
  const bool keep_kept = fit.block != nullptr && state->cache.kept_bytes() != 0 && keeps_small_caches(state) &&
                         within_growth_budget(fit.at, need);
  if (state->cache.blocks() != 0 && !keep_kept) {
    flush_cache_to_heap(state, CacheFlush::all);
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
      harvest_streams(state, kept_too);
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

void PoolCore::refresh_own_fences(StreamState* state, cudaStream_t stream) noexcept {
  std::lock_guard<SpinLock> lock(state->lock);
  // A stream the worker found quiet (no call for kActivityWindowNs: a long
  // kernel, a pause) is back: its cache is its own again, not stranded. The
  // worker would say so only at its next look, and meanwhile the growth
  // budget left this stream's own cached memory out: a stream back from 200
  // ms of device work grew instead of reusing or remapping its own frees
  // (test_remap.cpp's ghost test, on a loaded host).
  if (!state->active.load(std::memory_order_relaxed) && !state->is_legacy) {
    state->active.store(true, std::memory_order_relaxed);
    streams_.unstrand(state->cache.bytes());
  }
  // This is the stream's own call, so its handle is valid: cover its open
  // epoch with a fence if another stream asked for one, or none was recorded
  // for kFenceIntervalNs. Not on every miss: the stream itself may use its
  // pending frees at once, and a stream that misses on every allocation (new
  // sizes each time) paid an event record and query per miss.
  // The clock is read on the first miss and every 8th after (~50 ns a read
  // on the lent H100's host, a tenth of a miss): a fence comes at most seven
  // misses (a few microseconds) after its interval, not on every miss.
  if (state->open_epoch_has_frees &&
      (state->fence_requested.load(std::memory_order_relaxed) ||
       ((++state->misses & kMissClockEvery) == 1 && now_ns() - state->last_fence_ns >= kFenceIntervalNs))) {
    streams_.record_fence_locked(state, stream);
  }
  streams_.poll_fences_locked(state);
}

void PoolCore::flush_cache_to_heap(StreamState* state, CacheFlush which) noexcept {
  state->lock.lock();
  const std::uint64_t safe_epoch = state->safe_epoch;
  // Read under the lock: frees and fast-path hits on this stream from other
  // threads change it.
  Block* list = nullptr;
  auto take = [&](Block* b) {
    b->bin_next = list;
    list = b;
  };
  const std::size_t bound = kept_cache_bound(state);
  const bool keep_newest = keeps_small_caches(state) && cache_serves(state);
  if (which == CacheFlush::all || (state->cache.kept_bytes() > bound && !keep_newest)) {
    state->cache.take_all(take);
  } else {
    // Over its bound, a cache that keeps its small blocks and serves gives
    // back the least recently freed: flushing them all made a stream that
    // cycles through 25 size classes (threads_mixed, 64 sizes) miss on its
    // next few dozen allocations, 10% of all of them; 3-5% this way. A cache
    // that serves little (random sizes) is flushed whole, as before: keeping
    // its newest blocks cost ~1% more memory there (simulation).
    state->cache.take_loose(take);
    if (state->cache.kept_bytes() > bound) state->cache.take_oldest_kept(bound, take);
  }
  state->lock.unlock();
  while (list != nullptr) {
    Block* block = list;
    list = list->bin_next;
    heap_.take_from_cache(state, safe_epoch, block);
  }
  heap_.drop_complete_pending(state, safe_epoch);
}

void PoolCore::wait_for_own_frees(StreamState* state, cudaStream_t stream) noexcept {
  state->lock.lock();
  const std::uint64_t cutoff = streams_.close_epoch_locked(state);
  state->lock.unlock();
  // A foreign state's implicit handle may name another device's stream than
  // its frees were made on: only a synchronize of those devices covers them.
  const bool implicit = state->is_legacy || stream == cudaStreamPerThread;
  const cudaError_t synchronized = implicit && state->foreign.load(std::memory_order_relaxed)
                                       ? streams_.synchronize_devices()
                                       : driver_.stream_synchronize(state->is_legacy ? cudaStreamLegacy : stream);
  if (synchronized != cudaSuccess) return;
  ++stats_.remap_waits;
  state->lock.lock();
  const std::uint64_t safe_epoch = streams_.mark_complete_through_locked(state, cutoff);
  state->lock.unlock();
  heap_.drop_complete_pending(state, safe_epoch);
}

void PoolCore::harvest_streams(StreamState* except, bool kept_too) noexcept {
  // Every state the pool ever made (a lock-free list: a pool whose streams
  // come and go keeps one retired state per reused handle, and copying them
  // into a vector on every miss cost microseconds).
  streams_.for_each_state([&](StreamState* other) {
    if (other == except) return;
    // Nothing cached and nothing pending: nothing to gain (destroyed streams'
    // states stay in the pool; most of them end up like this).
    if (other->cache.blocks() == 0 && other->pending.empty()) return;
    if (other->frozen.load(std::memory_order_relaxed)) return;
    other->lock.lock();
    // Frees no fence covers yet. Only the stream's own next call may record
    // one (the handle may be destroyed meanwhile) — except the legacy stream,
    // which lives as long as the process: its fence is recorded now and
    // polled at once, so an idle legacy stream's frees are reusable at once
    // (without that, a stream freeing what others allocate held each batch
    // of frees for one more miss, and the pool grew to cover the lag).
    if (other->open_epoch_has_frees && other->is_legacy) streams_.record_fence_locked(other, cudaStreamLegacy);
    streams_.poll_fences_locked(other);
    const std::uint64_t safe_epoch = other->safe_epoch;
    if (other->retired.load(std::memory_order_relaxed) && other->fences.empty()) {
      other->frozen.store(true, std::memory_order_relaxed);  // thawed by StreamRegistry::synchronize
    }
    // A retired state's stream is gone, an inactive one's has not allocated
    // for kActivityWindowNs: their kept blocks would wait for allocations
    // that may never come, so they go with the rest (left, a destroyed
    // stream's stayed out of the heap until a device synchronize).
    const bool take_kept =
        kept_too || !other->active.load(std::memory_order_relaxed) || other->retired.load(std::memory_order_relaxed);
    Block* list = detach(other->cache, [&](Block* b, bool recurring) {
      return b->epoch <= safe_epoch && (take_kept || !(recurring && b->size <= kSmallBlockLimit));
    });
    if (other->open_epoch_has_frees && !other->is_legacy) {
      other->fence_requested.store(true, std::memory_order_relaxed);
    }
    const bool stranded = other->strands_cache();
    other->lock.unlock();
    std::uint64_t taken = 0;
    while (list != nullptr) {
      Block* block = list;
      list = list->bin_next;
      block->stream = nullptr;
      taken += block->size;
      heap_.insert_free(block);
    }
    if (stranded) streams_.unstrand(taken);
    heap_.drop_complete_pending(other, safe_epoch);
  });
}

Block* PoolCore::take_with_wait(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream) noexcept {
  const std::size_t granularity = arena_.granularity();
  for (StreamState* other = streams_.newest(); other != nullptr; other = other->older) {
    if (other == state) continue;
    other->lock.lock();
    if (other->fences.empty()) {
      other->lock.unlock();
      continue;
    }
    const Fence fence = other->fences.back();
    // Everything the fence covers goes to the heap, pending on `other`.
    const std::uint64_t safe_epoch = other->safe_epoch;
    Block* list = detach(other->cache, [&](Block* b, bool) { return b->epoch <= fence.epoch; });
    while (list != nullptr) {
      Block* block = list;
      list = list->bin_next;
      heap_.take_from_cache(other, safe_epoch, block);
    }
    // A placement whose only pending frees are `other`'s, all covered by the fence.
    auto covered = [&](std::size_t at) {
      for (const StreamState* pending : heap_.pending_streams()) {
        if (pending == state) continue;
        const std::uint64_t latest = pending->pending.latest_overlapping(at, size);
        if (latest != 0 && (pending != other || latest > fence.epoch)) return false;
      }
      return true;
    };
    Fit fit;
    int scanned = 0;
    for (auto it = heap_.free_blocks().lower_bound(size); it != heap_.free_blocks().end() && scanned < kBackedScan;
         ++it, ++scanned) {
      const std::size_t at =
          placement_.place(FreeRange{(*it)->offset, (*it)->size}, size, granularity, /*relaxed=*/true);
      if (at != PlacementPolicy::kNoFit && arena_.is_backed(at, need) && covered(at)) {
        fit = Fit{*it, at};
        break;
      }
    }
    Block* chosen = fit.block != nullptr ? heap_.carve(fit, size) : nullptr;
    if (chosen != nullptr) {
      if (driver_.stream_wait_event(stream, fence.event) == cudaSuccess) {
        other->lock.unlock();
        ++stats_.cross_stream_waits;
        ++stats_.cross_stream_reuses;
        return chosen;
      }
      heap_.insert_free(chosen);  // could not order the streams: give it back
    }
    other->lock.unlock();
  }
  return nullptr;
}

bool PoolCore::frees_held_anywhere() noexcept {
  bool held = false;
  // cache.blocks() is safe without the stream's lock; pending is the heap's.
  streams_.for_each_state([&](StreamState* s) { held = held || s->cache.blocks() != 0 || !s->pending.empty(); });
  return held;
}

void PoolCore::synchronize_everything() noexcept {
  std::vector<StreamState*> streams;
  try {
    streams = streams_.all();
  } catch (...) {
    return;
  }
  if (!streams_.synchronize(streams)) return;
  ++stats_.device_synchronizes;
  harvest_streams(nullptr);
}

void PoolCore::hand_out(Block* block, std::size_t bytes, StreamState* state, bool grown) noexcept {
  block->requested = bytes;
  block->backed = arena_.backed_prefix(block->offset, block->size);
  block->allocated_on = state;
  block->stream = nullptr;
  block->bin_next = nullptr;
  block->state.store(BlockState::live, std::memory_order_release);
  state->lock.lock();
  state->count_allocation(bytes);
  const bool recurring = state->cache.note_allocation(block->size);
  state->lock.unlock();
  budget_.earn(recurring);
  // The used high-water mark: a walk over every stream state, so once in
  // kUsedSampleEvery slow-path allocations per thread (and at every growth,
  // where the growth budget reads it). Sampling on every one cost 10 us a
  // miss on the H100 once a pool had seen a few hundred short-lived streams
  // (threads_mixed; docs/design.md, "Tuning constants").
  thread_local std::uint32_t t_hand_outs = 0;
  if (grown || (t_hand_outs++ % kUsedSampleEvery) == 0) sample_used_high();
}

}  // namespace sova::detail
