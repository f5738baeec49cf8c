// StreamCaches (stream_caches.hpp): a miss's work on the stream caches and
// the hand-off of their blocks to the heap. Every function from flush_own to
// synchronize_all runs with the heap lock held by the caller; stream locks are
// taken inside it, never the other way round.
#include "core/stream_caches.hpp"

#include "core/growth_budget.hpp"

#include <algorithm>

namespace sova::detail {

namespace {
// prepare_miss reads the clock on every (kMissClockEvery + 1)th miss
// (docs/design.md, "Tuning constants").
constexpr std::uint32_t kMissClockEvery = 7;

// Detaches the blocks `cache` holds for which `take(block, recurring)` is
// true and returns them as a list linked through bin_next.
template <class Take>
Block* detach(SizeBins& cache, Take take) {
  Block* list = nullptr;
  cache.extract_if_not([&](Block* b, bool recurring) { return !take(b, recurring); },
                       [&](Block* b) {
                         b->bin_next = list;
                         list = b;
                       });
  return list;
}
}  // namespace

StreamCaches::StreamCaches(Driver& driver, int device, bool check_streams, Heap& heap, const Arena& arena)
    : driver_(driver), heap_(heap), arena_(arena), registry_(driver, device, check_streams) {}

void StreamCaches::set_requested(Block* block, std::size_t bytes) noexcept {
  StreamState* owner = block->allocated_on;
  if (owner == nullptr) return;
  std::lock_guard<SpinLock> lock(owner->lock);
  StreamState::bump(owner->live_bytes, static_cast<std::int64_t>(bytes) - static_cast<std::int64_t>(block->requested));
  used_high_.note(static_cast<std::int64_t>(bytes) - static_cast<std::int64_t>(block->requested));
  block->requested = bytes;
}

void StreamCaches::stream_synchronized(StreamState* state, cudaStream_t stream) noexcept {
  // An implicit handle (0, cudaStreamPerThread) names the current device's
  // stream: where its state holds frees made with another device current
  // (foreign), this one synchronize does not cover them, so the hint is
  // not taken; a synchronize of every device they were made on completes them.
  const bool implicit = state->is_legacy() || stream == cudaStreamPerThread;
  if (implicit && state->foreign.load(std::memory_order_relaxed)) return;
  std::lock_guard<SpinLock> lock(state->lock);
  registry_.mark_frees_complete_locked(state);
}

void StreamCaches::prepare_miss(StreamState* state, cudaStream_t stream) noexcept {
  std::lock_guard<SpinLock> lock(state->lock);
  // A stream the worker found quiet (no call for kActivityWindowNs: a long
  // kernel, a pause) is back: its cache is its own again, not stranded. The
  // worker would say so only at its next look, and meanwhile the growth
  // budget left this stream's own cached memory out: a stream back from 200
  // ms of device work grew instead of reusing or remapping its own frees
  // (test_remap.cpp's ghost test, on a loaded host).
  if (!state->active.load(std::memory_order_relaxed) && !state->is_legacy()) {
    state->active.store(true, std::memory_order_relaxed);
    registry_.unstrand(state->cache.bytes());
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
    registry_.record_fence_locked(state, stream);
  }
  registry_.poll_fences_locked(state);
}

void StreamCaches::give_to_heap(StreamState* state, std::uint64_t safe_epoch, Block* list) noexcept {
  if (heap_.take_from_cache(state, safe_epoch, list)) state->fence_requested.store(true, std::memory_order_relaxed);
}

void StreamCaches::flush_own(StreamState* state) noexcept {
  if (state->cache.blocks() == 0 && !heap_.has_pending(state)) return;
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
  if (state->cache.kept_bytes() > bound && !keep_newest) {
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
  give_to_heap(state, safe_epoch, list);
  heap_.drop_complete_pending(state, safe_epoch);
}

bool StreamCaches::flush_all_own(StreamState* state) noexcept {
  // blocks() without the stream's lock: a hint (other threads freeing on
  // this stream may change it).
  if (state->cache.blocks() == 0) return false;
  Block* list = nullptr;
  state->lock.lock();
  const std::uint64_t safe_epoch = state->safe_epoch;
  state->cache.take_all([&](Block* b) {
    b->bin_next = list;
    list = b;
  });
  state->lock.unlock();
  give_to_heap(state, safe_epoch, list);
  heap_.drop_complete_pending(state, safe_epoch);
  return true;
}

bool StreamCaches::keeps_kept_blocks(const StreamState* state) const noexcept {
  return state->cache.kept_bytes() != 0 && keeps_small_caches(state);
}

void StreamCaches::harvest(const StreamState* except, bool kept_too) noexcept {
  // Every state the pool ever made (a lock-free list: a pool whose streams
  // come and go keeps one retired state per reused handle, and copying them
  // into a vector on every miss cost microseconds).
  registry_.for_each_state([&](StreamState* other) {
    if (other == except) return;
    // Nothing cached and nothing pending: nothing to gain (destroyed streams'
    // states stay in the pool; most of them end up like this).
    if (other->cache.blocks() == 0 && !heap_.has_pending(other)) return;
    if (other->frozen.load(std::memory_order_relaxed)) return;
    other->lock.lock();
    // Frees no fence covers yet. Only the stream's own next call may record
    // one (the handle may be destroyed meanwhile) — except the legacy stream,
    // which lives as long as the process: its fence is recorded now and
    // polled at once, so an idle legacy stream's frees are reusable at once
    // (without that, a stream freeing what others allocate held each batch
    // of frees for one more miss, and the pool grew to cover the lag).
    if (other->open_epoch_has_frees && other->is_legacy()) registry_.record_fence_locked(other, cudaStreamLegacy);
    registry_.poll_fences_locked(other);
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
    std::uint64_t taken = 0;
    Block* list = detach(other->cache, [&](Block* b, bool recurring) {
      const bool take = b->epoch <= safe_epoch && (take_kept || !(recurring && b->size <= kSmallBlockLimit));
      if (take) taken += b->size;
      return take;
    });
    if (other->open_epoch_has_frees && !other->is_legacy()) {
      other->fence_requested.store(true, std::memory_order_relaxed);
    }
    const bool stranded = other->strands_cache();
    other->lock.unlock();
    give_to_heap(other, safe_epoch, list);  // all complete: none pending
    if (stranded) registry_.unstrand(taken);
    heap_.drop_complete_pending(other, safe_epoch);
  });
}

Block* StreamCaches::take_fenced(StreamState* state, cudaStream_t stream, std::size_t size, std::size_t need) noexcept {
  for (StreamState* other = registry_.newest(); other != nullptr; other = other->older) {
    if (other == state) continue;
    // Its lock held until the wait is inserted: the fence stays outstanding
    // (its event is not polled and recycled meanwhile).
    std::lock_guard<SpinLock> lock(other->lock);
    if (other->fences.empty()) continue;
    const Fence fence = other->fences.back();
    // Everything the fence covers goes to the heap, pending on `other`.
    const std::uint64_t safe_epoch = other->safe_epoch;
    give_to_heap(other, safe_epoch, detach(other->cache, [&](Block* b, bool) { return b->epoch <= fence.epoch; }));
    const Fit fit = heap_.fit_covered_by_fence(state, other, fence.epoch, size,
                                               [&](std::size_t at) { return arena_.is_backed(at, need); });
    Block* chosen = fit.block != nullptr ? heap_.carve(fit, size) : nullptr;
    if (chosen == nullptr) continue;
    if (driver_.stream_wait_event(stream, fence.event) == cudaSuccess) return chosen;
    heap_.insert_free(chosen);  // could not order the streams: give it back
  }
  return nullptr;
}

void StreamCaches::fence_own_pending(StreamState* state, cudaStream_t stream) noexcept {
  if (!heap_.has_pending(state)) return;
  std::lock_guard<SpinLock> lock(state->lock);
  if (state->open_epoch_has_frees) registry_.record_fence_locked(state, stream);
}

bool StreamCaches::wait_for_own_frees(StreamState* state, cudaStream_t stream) noexcept {
  state->lock.lock();
  const std::uint64_t cutoff = registry_.close_epoch_locked(state);
  state->lock.unlock();
  // A foreign state's implicit handle may name another device's stream than
  // its frees were made on: only a synchronize of those devices covers them.
  const bool implicit = state->is_legacy() || stream == cudaStreamPerThread;
  const cudaError_t synchronized = implicit && state->foreign.load(std::memory_order_relaxed)
                                       ? registry_.synchronize_devices()
                                       : driver_.stream_synchronize(state->is_legacy() ? cudaStreamLegacy : stream);
  if (synchronized != cudaSuccess) return false;
  state->lock.lock();
  const std::uint64_t safe_epoch = registry_.mark_complete_through_locked(state, cutoff);
  state->lock.unlock();
  heap_.drop_complete_pending(state, safe_epoch);
  return true;
}

bool StreamCaches::holds_frees() const noexcept {
  if (heap_.any_pending()) return true;
  bool held = false;
  // cache.blocks() is safe without the stream's lock.
  registry_.for_each_state([&](const StreamState* s) { held = held || s->cache.blocks() != 0; });
  return held;
}

bool StreamCaches::synchronize_all() noexcept {
  std::vector<StreamState*> states;
  try {
    states = registry_.all();
  } catch (...) {
    return false;
  }
  if (!registry_.synchronize(states)) return false;
  harvest(nullptr);
  return true;
}

bool StreamCaches::count_slow_allocation(StreamState* state, std::size_t bytes, std::size_t size) noexcept {
  std::lock_guard<SpinLock> lock(state->lock);
  state->count_allocation(bytes);
  used_high_.note(static_cast<std::int64_t>(bytes));
  return state->cache.note_allocation(size);
}

void StreamCaches::sample_used_high() noexcept {
  const std::uint64_t used = registry_.live_bytes();
  std::uint64_t high = used_high_sampled_.load(std::memory_order_relaxed);
  while (used > high && !used_high_sampled_.compare_exchange_weak(high, used)) {
  }
}

void StreamCaches::reset_used_high() {
  for (StreamState* s : registry_.all()) {
    std::lock_guard<SpinLock> lock(s->lock);
    s->live_high.store(s->live_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  used_high_sampled_.store(registry_.live_bytes());
  used_high_.reset();
}

bool StreamCaches::cache_serves(const StreamState* state) const noexcept {
  return GrowthBudget::cache_serves(state->fast_hits.load(std::memory_order_relaxed),
                                    state->allocations.load(std::memory_order_relaxed));
}

bool StreamCaches::keeps_small_caches(const StreamState* state) const noexcept {
  return GrowthBudget::keeps_small_caches(active(), used_high(), cache_serves(state));
}

std::size_t StreamCaches::kept_cache_bound(const StreamState* state) const noexcept {
  return GrowthBudget::kept_cache_bound(cache_serves(state), active(), used_high());
}

}  // namespace sova::detail
