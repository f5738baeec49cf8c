// StreamCaches: the pool's per-stream side — a state per stream
// (stream_state.hpp) with its cache of freed blocks, and every hand-off of
// blocks between those caches and the heap.
//
// It owns the states' fields: through its StreamRegistry (stream_registry.hpp)
// the states themselves, their epochs and fences; here, the caches, the
// counters statistics read, the release worker's activity tracking, and the
// sampled used high-water mark. A StreamState's fields are private, with
// StreamCaches and StreamRegistry its friends: other code reads only the
// identity the state's accessors give (is_legacy, stream_id: fixed before
// the state is published) and calls the operations below.
//
// Locks:
//   * a state's spin lock: its cache, epochs, fences, last_freed and the
//     fence counters. The fast path (take_cached, cache_freed) takes only it.
//   * none: the counters (atomics written under the state's lock, read by
//     statistics without it) and the release worker's own fields
//     (track_activity runs on its thread alone).
//   * the heap lock: the pending ranges are the heap's (Heap::add_pending);
//     every member from flush_own to synchronize_all, the "heap lock held"
//     section below, expects the caller to hold it, and takes stream locks
//     inside it.
// Lock order: the heap lock, then the registry's mutex, then a state's lock;
// the events' mutex last, alone.
//
// A miss flows one way: PoolCore -> StreamCaches -> Heap (and Arena, read,
// for take_fenced) -> the driver. Nothing here calls back into PoolCore.
#pragma once

#include "arena/arena.hpp"
#include "core/block.hpp"
#include "core/clock.hpp"
#include "core/heap.hpp"
#include "core/stream_registry.hpp"
#include "core/used_high.hpp"

#include <sova/driver.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace sova::detail {

// Tuning constants of the free's fences (docs/design.md, "Tuning constants").

/// A large free reads the clock on every (kClockEvery + 1)th call only.
inline constexpr std::uint32_t kClockEvery = 15;
/// A stream freeing blocks that other streams allocated (a consumer) records a
/// fence on the first such free and every (kForeignFenceEvery + 1)th after:
/// only fences hand the blocks back to their streams.
inline constexpr std::uint32_t kForeignFenceEvery = 15;
/// A release threshold that keeps everything (the caching configuration).
inline constexpr std::uint64_t kKeepEverything = ~std::uint64_t{0};
/// The fast path serves larger blocks only when they are the block the stream freed last.
inline constexpr std::size_t kLargestCachedBlock = std::size_t{4} << 20;
/// The release worker waits on inactive streams' fences (event waits, never a
/// device synchronize: stream_activity.cpp) at most this often per pool.
inline constexpr std::int64_t kReclaimIntervalNs = 1'000'000'000;

/// What the streams' states add up to (StreamCaches::tally).
struct StreamTotals {
  std::int64_t used = 0;         ///< requested bytes live
  std::int64_t live_blocks = 0;  ///< blocks live
  std::int64_t stream_high = 0;  ///< the highest stream's own high-water mark
  std::uint64_t allocations = 0;
  std::uint64_t deallocations = 0;
  std::uint64_t fast_hits = 0;
};

class StreamCaches {
 public:
  /// `check_streams`: PoolOptions::check_streams. `heap` and `arena` outlive this.
  StreamCaches(Driver& driver, int device, bool check_streams, Heap& heap, const Arena& arena);
  StreamCaches(const StreamCaches&) = delete;
  StreamCaches& operator=(const StreamCaches&) = delete;

  // ---- finding a stream's state (StreamRegistry says how) ------------------------
  StreamState* find(cudaStream_t stream, cudaError_t* error = nullptr) noexcept {
    return registry_.find(stream, error);
  }
  StreamState* renew(StreamState* state, unsigned long long id) noexcept { return registry_.renew(state, id); }
  void learn_device(StreamState* state, cudaStream_t stream) noexcept { registry_.learn_device(state, stream); }
  int known_device(cudaStream_t stream) noexcept { return registry_.known_device(stream); }

  // ---- the fast path: the state's lock only --------------------------------------

  /// The allocation's fast path: a block of exactly `size` bytes freed earlier
  /// on `state`'s stream and backed for `need` (above kLargestCachedBlock,
  /// only the block it freed last), made live for `bytes`; nullptr when there
  /// is none (the slow path's turn). First records the fence another stream
  /// asked for (`stream` is the caller's own: its handle is valid).
  [[gnu::always_inline]] Block* take_cached(StreamState* state, std::size_t size, std::size_t need,
                                            std::size_t bytes, cudaStream_t stream) noexcept {
    state->lock.lock();
    if (state->fence_requested.load(std::memory_order_relaxed)) registry_.record_fence_locked(state, stream);
    Block* block = state->cache.pop(size);
    if (block != nullptr && size > kLargestCachedBlock && block != state->last_freed) {
      state->cache.push(block);  // back on top, as it was: the heap's best fit places the request
      block = nullptr;
    }
    if (block != nullptr && block->backed < need) {
      state->cache.push(block);  // backed for a smaller request: the slow path backs the rest
      block = nullptr;
    }
    if (block != nullptr) {
      block->state.store(BlockState::live, std::memory_order_relaxed);
      block->requested = bytes;
      block->stream = nullptr;
      block->allocated_on = state;
      state->count_allocation(bytes);
      used_high_.note(static_cast<std::int64_t>(bytes));
      StreamState::bump(state->fast_hits);
    }
    state->lock.unlock();
    return block;
  }

  /// The free's fast path: the live `block` at `offset` cached on `state`,
  /// stamped with its open epoch; false (nothing changed) for a block not
  /// live there (a double free). A fence is recorded on `stream` when one is
  /// due and `may_fence`: another stream asked, the block was another
  /// stream's (every kForeignFenceEvery + 1), or the block is of a
  /// `granularity` or more and the pool releases idle memory
  /// (`release_threshold`) or the fence interval has passed.
  /// `order_free()` runs once the block has left the live state and before
  /// anyone can take it (the state's lock held, no fence recorded yet): the
  /// pool orders the free after work that may still write the block (a
  /// wake's restore: PoolCore::free_stamped). The state change is
  /// sequentially consistent, so that a load it makes is ordered after it.
  template <class OrderFree>
  [[gnu::always_inline]] bool cache_freed(Block* block, std::size_t offset, StreamState* state, cudaStream_t stream,
                                          bool may_fence, std::size_t granularity,
                                          const std::atomic<std::uint64_t>& release_threshold,
                                          OrderFree&& order_free) noexcept {
    state->lock.lock();
    BlockState expected = BlockState::live;
    if (block->offset != offset ||
        !block->state.compare_exchange_strong(expected, BlockState::cached, std::memory_order_seq_cst)) {
      state->lock.unlock();
      return false;
    }
    order_free();
    block->graph_memory.store(false, std::memory_order_relaxed);  // a graph's block the graph let go
    block->stream = state;
    block->epoch = state->epoch;
    state->open_epoch_has_frees = true;
    state->cache.push(block);
    state->last_freed = block;
    StreamState::bump(state->live_bytes, -static_cast<std::int64_t>(block->requested));
    used_high_.note(-static_cast<std::int64_t>(block->requested));
    StreamState::bump(state->live_blocks, -1);
    StreamState::bump(state->deallocations);
    bool fence = state->fence_requested.load(std::memory_order_relaxed);
    if (!fence && block->allocated_on != state && (++state->foreign_frees & kForeignFenceEvery) == 1) {
      fence = true;
    }
    if (!fence && block->size >= granularity) {
      if (release_threshold.load(std::memory_order_relaxed) != kKeepEverything) {
        // The pool gives idle memory back: only a fence lets the release worker
        // know this free complete once the stream goes quiet (it never
        // synchronizes a device: docs/graphs.md, "Captures sova does not know").
        // An event record beside a free of a granule or more, never a query
        // (StreamRegistry::record_fence_locked says what each costs).
        fence = true;
      } else if ((++state->large_frees & kClockEvery) == 1) {
        fence = now_ns() - state->last_fence_ns >= kFenceIntervalNs;  // the first, then every 16th
      }
    }
    if (fence && may_fence) registry_.record_fence_locked(state, stream);
    state->lock.unlock();
    return true;
  }

  /// The live `block` now counts `bytes` as requested; its allocating
  /// stream's used bytes follow (PoolCore::set_requested).
  void set_requested(Block* block, std::size_t bytes) noexcept;
  /// Everything freed on `state`'s stream `stream` so far is complete
  /// (Pool::stream_synchronized), unless the hint cannot cover it: an
  /// implicit handle whose state holds frees made on another device.
  void stream_synchronized(StreamState* state, cudaStream_t stream) noexcept;

  // ---- a miss, before it takes the heap lock ---------------------------------------

  /// Marks a stream the release worker found quiet active again, records a
  /// fence on `stream` when one is due (the caller is that stream's own
  /// allocation) and polls the stream's fences. Outside the heap lock because
  /// both are driver calls (0.4 us each on the H100, more when 16 threads
  /// call the driver at once), and every other thread's miss waited for them.
  void prepare_miss(StreamState* state, cudaStream_t stream) noexcept;

  // ---- the hand-off to the heap: heap lock held ------------------------------------

  /// Moves `state`'s cached blocks into the heap, coalesced, but its small
  /// blocks of recurring sizes (SizeBins::note_allocation) while they hold
  /// at most the kept-cache bound (over it, the oldest of them, or all where
  /// the cache serves little); pending on `state` as far as its fences do not
  /// cover them. Drops its pending ranges that are complete. Nothing when it
  /// caches nothing and has nothing pending.
  void flush_own(StreamState* state) noexcept;
  /// Moves every block `state` caches into the heap; false (nothing done)
  /// when it caches none.
  bool flush_all_own(StreamState* state) noexcept;
  /// Whether `state` keeps its kept blocks on a miss whose fit needs new
  /// memory within the growth budget: it caches some, and other streams
  /// share the pool or the pool is small and the cache serves
  /// (GrowthBudget::keeps_small_caches). A hint, without its lock.
  bool keeps_kept_blocks(const StreamState* state) const noexcept;
  /// Moves other streams' frees known complete into the heap (without their
  /// kept blocks unless `kept_too`, or their stream is gone or quiet);
  /// fences the legacy stream, asks others for a fence where frees are not
  /// yet covered by one. `except`: the allocating stream's state, or nullptr.
  void harvest(const StreamState* except, bool kept_too = true) noexcept;
  /// Step 5: a block of `size` bytes backed for `need`, carved where the only
  /// pending frees are another stream's covered by its newest fence, and
  /// `stream` (`state`'s) made to wait for that fence; the frees the fence
  /// covers go to the heap. nullptr when none.
  Block* take_fenced(StreamState* state, cudaStream_t stream, std::size_t size, std::size_t need) noexcept;
  /// Before chunks move for `state`'s stream (its own call: the handle is
  /// valid): a fence over its open epoch where it has frees pending, so that
  /// a pinned ghost settles later by a poll or a wait for this stream alone.
  void fence_own_pending(StreamState* state, cudaStream_t stream) noexcept;
  /// Synchronizes `stream` (the caller's own), after which every free made
  /// on it before the call is complete: its pending ranges go. False when
  /// the synchronize failed (nothing marked).
  bool wait_for_own_frees(StreamState* state, cudaStream_t stream) noexcept;
  /// Whether any stream caches blocks or has frees pending in the heap.
  bool holds_frees() const noexcept;
  /// Makes every free made so far complete (StreamRegistry::synchronize:
  /// fences, else the devices) and moves them all into the heap. False when
  /// that failed.
  bool synchronize_all() noexcept;
  /// Counts the allocation of a block of `size` bytes for `bytes` that the
  /// slow path handed to `state`; true when its size recurs on this stream.
  bool count_slow_allocation(StreamState* state, std::size_t bytes, std::size_t size) noexcept;

  // ---- the release worker (stream_activity.cpp) ----------------------------------

  /// Marks each state active if its stream allocated or freed in the last
  /// kActivityWindowNs (retired states never are), counts the active ones
  /// and the stranded bytes; then, at most every kReclaimIntervalNs unless
  /// the stranded memory exceeds the growth slack, waits for the fences of
  /// inactive streams' frees and moves their blocks into the heap (it takes
  /// the heap lock). Never a device synchronize (docs/design.md, "Quiet
  /// streams"). The release worker's thread only.
  void track_activity() noexcept;
  /// Before the pool unmaps: waits for every free's work — their fences
  /// where no block is live and every free has one, else the devices. False
  /// when that synchronize failed (a capture runs).
  bool wait_for_all_work() noexcept;

  // ---- figures --------------------------------------------------------------------
  std::uint64_t live_bytes() const noexcept { return registry_.live_bytes(); }
  std::uint64_t stranded() const noexcept { return registry_.stranded(); }
  std::size_t active() const noexcept { return registry_.active(); }
  std::size_t count() const noexcept { return registry_.count(); }
  std::size_t retired_count() { return registry_.retired_count(); }
  std::uint64_t events_recorded() const noexcept { return registry_.events_recorded(); }
  /// Allocations and frees so far (the release worker's idleness test).
  std::uint64_t activity() { return registry_.activity(); }
  /// The used high-water mark, sampled (sample_used_high): what the growth budget reads.
  std::uint64_t used_high() const noexcept { return used_high_sampled_.load(std::memory_order_relaxed); }
  /// The exact used high-water mark while one thread calls, else the mark
  /// reached before a second did (UsedHigh); with the sampled one, what
  /// cudaMemPoolAttrUsedMemHigh reports.
  std::uint64_t used_high_counted() const noexcept { return used_high_.high(); }
  /// Raises the sampled used high-water mark to what is used now.
  void sample_used_high() noexcept;
  /// Every high-water mark down to what is used now
  /// (cudaMemPoolAttrUsedMemHigh). Throws std::bad_alloc.
  void reset_used_high();

  /// Adds up every state's counters, and calls visit(block) for each block
  /// a cache holds, each state's lock held in turn. Throws std::bad_alloc.
  template <class Visit>
  StreamTotals tally(Visit visit) {
    StreamTotals t;
    for (StreamState* s : registry_.all()) {
      std::lock_guard<SpinLock> lock(s->lock);
      t.used += s->live_bytes.load(std::memory_order_relaxed);
      t.live_blocks += s->live_blocks.load(std::memory_order_relaxed);
      t.stream_high = std::max(t.stream_high, s->live_high.load(std::memory_order_relaxed));
      t.allocations += s->allocations.load(std::memory_order_relaxed);
      t.deallocations += s->deallocations.load(std::memory_order_relaxed);
      t.fast_hits += s->fast_hits.load(std::memory_order_relaxed);
      s->cache.for_each(visit);
    }
    return t;
  }

  /// What the caches hold, as the invariant checker compares it with the heap's blocks.
  struct Census {
    std::size_t cached_blocks = 0;
    std::int64_t live_bytes = 0;
  };
  /// Calls check(census) with the registry's mutex and every state's lock
  /// held (no state made or changed meanwhile: a state made mid-check would
  /// make the caches and the cached blocks disagree on a sound pool); then
  /// fail(what, block) for a block a cache holds that is not cached by it.
  /// Heap lock held. Throws std::bad_alloc.
  template <class Check, class Fail>
  void audit(Check check, Fail fail) {
    std::lock_guard<std::mutex> registry_lock(registry_.mutex());
    const std::vector<StreamState*> states = registry_.all_locked();
    for (StreamState* s : states) s->lock.lock();
    Census census;
    for (const StreamState* s : states) {
      census.cached_blocks += s->cache.blocks();
      census.live_bytes += s->live_bytes.load();
    }
    check(census);
    for (const StreamState* s : states) {
      s->cache.for_each([&](const Block* b) {
        if (b->state.load() != BlockState::cached || b->stream != s) fail("cache holds a block not cached by it", b);
      });
    }
    for (StreamState* s : states) s->lock.unlock();
  }

  // ---- fences and synchronizes -----------------------------------------------------
  /// StreamRegistry::complete_through (a pinned ghost's settle).
  bool complete_through(StreamState* owner, std::uint64_t epoch, bool* waited) noexcept {
    return registry_.complete_through(owner, epoch, waited);
  }
  cudaError_t synchronize_devices() noexcept { return registry_.synchronize_devices(); }
  void pause_synchronizes_while(const std::atomic<std::size_t>* open) noexcept {
    registry_.pause_synchronizes_while(open);
  }

 private:
  /// Moves the cached blocks of `list` (linked through bin_next, detached
  /// from `state`'s cache) into the heap, pending on `state` where
  /// `safe_epoch` does not cover them; asks it for a fence when the heap
  /// says one is due. Heap lock held.
  void give_to_heap(StreamState* state, std::uint64_t safe_epoch, Block* list) noexcept;
  /// The kept-cache rules of GrowthBudget, with this pool's figures.
  bool cache_serves(const StreamState* state) const noexcept;
  bool keeps_small_caches(const StreamState* state) const noexcept;
  std::size_t kept_cache_bound(const StreamState* state) const noexcept;

  Driver& driver_;
  Heap& heap_;
  const Arena& arena_;
  StreamRegistry registry_;
  /// The used high-water mark, sampled: a walk over every state, so at most
  /// once in kUsedSampleEvery slow-path allocations (PoolCore::hand_out).
  std::atomic<std::uint64_t> used_high_sampled_{0};
  UsedHigh used_high_;  ///< the exact mark while one thread makes every call
  std::int64_t reclaimed_ns_ = 0;  ///< the release worker's last wait for inactive streams
};

}  // namespace sova::detail
