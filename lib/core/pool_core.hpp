// PoolCore: the pool behind sova::Pool — the fast paths and the slow path's
// ladder, over components that each own their state (docs/design.md,
// "Components"):
//   * StreamCaches (stream_caches.hpp): a state per stream — its cache of
//     freed blocks, its epochs and fences —, activity, stranded memory, and
//     every hand-off of blocks between the caches and the heap;
//   * Heap (heap.hpp): the blocks, the best-fit index of free ones, the
//     block map, every stream's pending ranges, and the heap lock;
//   * Arena (arena/arena.hpp): the VA range and the physical chunks under it;
//   * Remapper (remapper.hpp): free chunks moved under a block that needs backing;
//   * GrowthBudget (growth_budget.hpp): when to grow, remap or keep caches;
//   * SlowPathStats (slow_path_stats.hpp): what the slow path did.
//
// The fast path (allocate, deallocate): a block of exactly the rounded size
// popped from, or pushed onto, the calling stream's cache under that
// stream's spin lock. No lock shared between streams, no allocation, no
// virtual call but the driver's, and these driver calls:
//   * check_streams off, or the legacy default stream: none.
//   * check_streams on (the default), a created or per-thread stream: an
//     allocation asks stream_is_capturing and stream_id (a reused handle of
//     a destroyed stream must not pop its frees), a free stream_is_capturing.
//   * on a system of several devices: an implicit handle (0,
//     cudaStreamPerThread) asks for the current device, allocation and free
//     (its state is per device; cuCtxGetCurrent, cached per thread). Nothing
//     else: a stream's device is asked only when its state is made or renewed
//     (StreamRegistry::learn_device).
//   * now and then a fence: an event record on a large free (at most every
//     kFenceIntervalNs), on the first free of another stream's block and
//     every 16th after, or when another stream asked for one.
// Budget: ~20 ns each way on the H100's host without the checks; each check
// is a driver call (test_fast_path_cost.cpp counts them).
//
// The slow path, a ladder tried in order until one step yields a block
// (allocate_slow, pool_core_slow.cpp; the heap lock held throughout). It
// calls down only: PoolCore -> StreamCaches -> Heap, then growth -> Arena ->
// the driver; the components below never call back into PoolCore (but the
// Arena's ghost settler and the heap's out-of-host-memory hook, callbacks
// that complete frees).
//   1. this stream's own cache flushed into the heap (coalesced); the best
//      fit over the whole free VA that this stream may use, if backed
//   2. other streams' frees known complete (opportunistic reuse), again
//   3. (the step 5 wait first, when the pool holds more free than used)
//   4. grow: back that best fit (remapping free chunks beyond the growth
//      budget), releasing free physical memory if the device is full
//   5. another stream's fenced frees, with a wait inserted (internal
//      dependencies) — after growth, not before: a wait ties this stream to
//      another's running work, growth costs once (docs/design.md)
//   6. synchronize the devices, so every free is complete; retry 1-5
//   7. out of memory: everything as it was
#pragma once

#include "arena/arena.hpp"
#include "core/graph_pool.hpp"
#include "core/growth_budget.hpp"
#include "core/heap.hpp"
#include "core/placement.hpp"
#include "core/pointer_status.hpp"
#include "core/pool_sleep.hpp"
#include "core/sleep_pin_ahead.hpp"
#include "core/remapper.hpp"
#include "core/slow_path_stats.hpp"
#include "core/stream_caches.hpp"

#include <sova/options.hpp>
#include <sova/sleep.hpp>
#include <sova/stats.hpp>
#include <sova/views.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace sova::detail {

// Tuning constants: one line each on what it bounds; the measurements behind
// the values are in docs/design.md, section "Tuning constants".

/// The used high-water mark is sampled at one slow-path allocation in this many per thread.
inline constexpr std::uint32_t kUsedSampleEvery = 16;

class PoolCore {
 public:
  explicit PoolCore(const PoolOptions& options);
  ~PoolCore();
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  cudaError_t allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  cudaError_t deallocate(void* ptr, cudaStream_t stream) noexcept;
  /// The free of a block whose graphs are gone, freed in them
  /// (PoolGraphs::give_back): stamped on the pool's own `stream`, never
  /// capturing, as deallocate's, without collecting released graphs (it is
  /// called from the collect).
  cudaError_t free_released_graph_block(void* ptr, cudaStream_t stream) noexcept;
  /// The caller's free, outside capture, of a graph's output whose graphs are
  /// gone now (PoolGraphs::give_back_freed_on): stamped on `freer`, the state
  /// of the stream it was freed on, whose handle is never used here (the
  /// stream may capture or be destroyed by now): no fence is recorded; the
  /// stream's next fence, or a synchronize, completes it.
  cudaError_t free_graph_output(void* ptr, StreamState* freer) noexcept;
  /// The live block at `ptr` now counts `bytes` as requested (a graph's block
  /// reused within its capture: PoolGraphs::requested); its allocating
  /// stream's used bytes follow.
  void set_requested(void* ptr, std::size_t bytes) noexcept;
  cudaError_t trim_to(std::size_t bytes_to_keep) noexcept;
  /// Pool::stream_synchronized: everything freed on `stream` so far is complete.
  cudaError_t stream_synchronized(cudaStream_t stream) noexcept;
  /// Called by the release worker every kReleasePeriod: if no allocation or
  /// free happened since the last call, releases memory above the release
  /// threshold whose frees are known complete (release_worker.hpp says why).
  void release_if_idle() noexcept;
  /// Called by the release worker every kReleasePeriod, before
  /// release_if_idle: StreamCaches::track_activity. A program that destroys
  /// a stream does not tell the pool, and no fence can be recorded on a
  /// handle that may be gone: without it, such frees (and the blocks the
  /// stream kept) stayed out of reach until an out-of-memory synchronize or
  /// a trim (docs/design.md, "Quiet streams").
  void track_stream_activity() noexcept { caches_.track_activity(); }

  cudaError_t set_attribute(cudaMemPoolAttr attr, const void* value) noexcept;
  cudaError_t get_attribute(cudaMemPoolAttr attr, void* value) noexcept;
  cudaError_t set_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept;
  cudaError_t get_access(cudaMemAccessFlags* flags, const cudaMemLocation* location) noexcept;

  PoolStats stats();
  std::string describe();   ///< one line of statistics, for error messages
  /// Whether `bytes` can never be allocated here, whatever is freed: more
  /// than the VA range, or more granules than the pool may ever back
  /// (largest_request_). One compare.
  bool beyond_limit(std::size_t bytes) const noexcept { return bytes > largest_request_; }
  void check_invariants();  ///< throws sova::Error on the first broken invariant

  bool contains(const void* ptr) const noexcept { return arena_.contains(reinterpret_cast<std::uintptr_t>(ptr)); }
  std::size_t block_size(const void* ptr) const noexcept;
  /// What `ptr` is to this pool (a live block, inside one, freed, foreign),
  /// for the message of a refused free (Heap::status_of). Error paths only.
  PointerStatus pointer_status(const void* ptr);
  /// Pool::chunks_under: the chunks under a live block, under the heap lock.
  cudaError_t chunks_under(const void* ptr, std::size_t bytes, std::vector<ChunkView>* out);
  const Arena& arena() const noexcept { return arena_; }  ///< base, size, granularity, props: fixed for life
  int device() const noexcept { return device_; }
  int stream_device(cudaStream_t stream) noexcept { return caches_.known_device(stream); }
  Driver& driver() const noexcept { return driver_; }
  /// Allocations and frees under graph capture (graph_memory.hpp).
  GraphMemory& graph_memory() noexcept { return graphs_.memory(); }
  /// Flags the live block at `ptr` (just allocated by PoolGraphs::take) as
  /// graph memory: deallocate then asks GraphMemory first (Block::graph_memory).
  void mark_graph_memory(void* ptr) noexcept;

  // ---- sleep and wake (pool_core_sleep.cpp; PoolSleep says how) -------------
  cudaError_t sleep(SleepMode mode, cudaStream_t stream) noexcept;
  cudaError_t wake(cudaStream_t stream) noexcept;
  bool asleep() const noexcept { return sleep_.asleep(); }
  cudaError_t release_sleep_host_memory() noexcept;
  cudaError_t reserve_sleep_backup(std::size_t bytes) noexcept;
  /// PoolSleep::backup_at for the device address `ptr`: the host address of
  /// the last backup's copy of it, and in `*there` how many of the next
  /// `bytes` lie there in one piece; nullptr and 0 outside the arena or where
  /// the backup holds none.
  const void* sleep_backup_at(const void* ptr, std::size_t bytes, std::size_t* there) noexcept;
  PinStep sleep_pin_refusal() const noexcept { return sleep_.pin_refusal(); }

 private:
  /// cudaErrorStreamCaptureUnsupported when `stream` is being captured (a
  /// free under capture of a block that is not graph memory), the driver's
  /// error for an invalid handle, else cudaSuccess.
  cudaError_t refuse_capture(cudaStream_t stream) noexcept;
  /// The free of the live `block` at `offset`, stamped on `state`'s open
  /// epoch (the fast path's free, once the checks are done); a fence due is
  /// recorded on `stream` only if `may_fence`. cudaErrorInvalidValue for a
  /// block not live.
  cudaError_t free_stamped(Block* block, std::size_t offset, StreamState* state, cudaStream_t stream,
                           bool may_fence) noexcept;
  /// The block starting exactly at `ptr`, its pool offset in `*offset`;
  /// nullptr outside the arena or off a block's start (heap_.find answers for
  /// any of a block's first 512 bytes).
  Block* block_starting_at(const void* ptr, std::size_t* offset) const noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    if (!arena_.contains(address)) return nullptr;
    *offset = address - arena_.base();
    Block* block = heap_.find(*offset);
    return block != nullptr && block->offset == *offset ? block : nullptr;
  }

  // ---- the slow path (pool_core_slow.cpp) -----------------------------------
  cudaError_t allocate_slow(void** ptr, std::size_t bytes, std::size_t size, std::size_t need, StreamState* state,
                            cudaStream_t stream) noexcept;
  /// Steps 1 and 2 of the ladder; `step` says which served the block.
  Block* find_without_growth(std::size_t size, std::size_t need, StreamState* state, SlowStep* step) noexcept;
  /// Step 5: another stream's fenced frees, this stream made to wait for
  /// the fence (StreamCaches::take_fenced), counted.
  Block* take_with_wait(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream) noexcept;
  /// Makes a block taken by the slow path live for `state`; `grown`: the
  /// allocation created or remapped memory (the used high-water mark is
  /// sampled then, and one in kUsedSampleEvery otherwise).
  void hand_out(Block* block, std::size_t bytes, StreamState* state, bool grown) noexcept;

  // ---- growth (pool_core_grow.cpp) ------------------------------------------------
  cudaError_t grow(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream, Block** out) noexcept;
  /// Backs the first `need` bytes of `block` (carved, not yet handed out for
  /// `state`'s `stream`): beyond the growth budget, from free memory first
  /// (cover_from_free_memory); new chunks for the rest, safe free memory
  /// released if the device is full. On failure the moved chunks are moved
  /// back where they were and nothing new is created.
  cudaError_t back_block(Block* block, std::size_t need, StreamState* state, cudaStream_t stream) noexcept;
  /// Beyond the growth budget (remap_ only), so that backing [offset,
  /// offset + need) does not raise reserved memory while free memory could
  /// pay for it, in order of cost:
  ///   1. free chunks whose frees are known complete are moved under it;
  ///   2. if granules are still missing and the stream's own pending frees
  ///      may hold chunks, the stream is synchronized
  ///      (StreamCaches::wait_for_own_frees) and chunks move again: without
  ///      it a single-stream program's remapping found nothing to move on
  ///      the GPU, its frees of the last millisecond never known complete
  ///      when it grew (an LSTM's replay: 1.27x peak reserved over live
  ///      without, 1.06x with, H100); paid while the peak is being found,
  ///      not every step;
  ///   3. if granules are still missing, safe free chunks of at least that
  ///      size are released, so the chunks created for the gaps replace them.
  /// Without step 3 every pass of a program whose steps vary (an LSTM over
  /// varying lengths) created a few small chunks that no free one could
  /// fill, and reserved memory crept up pass after pass (1.026x to 1.055x).
  void cover_from_free_memory(std::size_t offset, std::size_t need, StreamState* state, cudaStream_t stream,
                              std::vector<Remapper::ChunkMove>& moves) noexcept;
  /// GrowthBudget::allows for backing [offset, offset + need), with this
  /// pool's figures (the live peak including this request, stranded bytes).
  bool within_growth_budget(std::size_t offset, std::size_t need) noexcept;
  /// Arena's GhostSettler: makes the pin's frees complete (StreamRegistry::
  /// complete_through), counting a wait. Heap lock held.
  bool settle_ghost(const Arena::GhostPin& pin) noexcept;

  // ---- release (pool_core_release.cpp); heap lock held ------------------------
  /// Releases safe free physical memory until at most `keep` stays backed
  /// (with `may_cross`, the last chunk released may take it below `keep`;
  /// without, such a chunk is kept). Returns the bytes released.
  std::size_t release_free_memory(std::size_t keep, bool may_cross = false) noexcept;
  /// trim_to's release: at most `keep` stays backed where safe free memory
  /// allows, a chunk straddling `keep` released too. Returns the bytes released.
  std::size_t release_down_to(std::size_t keep) noexcept;
  /// Releases safe free chunks until at least `bytes` are gone, or none is
  /// left: whole chunks, so possibly more. Returns the bytes released.
  std::size_t release_at_least(std::size_t bytes) noexcept;
  /// cudaSuccess where sleep or wake may order work on `stream`, else the
  /// judge's refusal (judge_stream), before anything changes.
  cudaError_t judge_sleep_stream(cudaStream_t stream) noexcept;

  Driver& driver_;
  const int device_;
  DeviceInfo info_;
  Arena arena_;
  /// The largest request this pool may ever serve: the whole granules of
  /// the most physical memory it may hold (its max_size, else — or where
  /// larger — the device's memory), and no more than its VA range. A larger
  /// one is refused before the slow path (PoolCore::allocate): a block needs
  /// at least its bytes in whole granules, wherever it is placed.
  const std::size_t largest_request_;
  /// Where the policy's regions meet (region_boundary(), 0: one region), free
  /// blocks are never merged, so no block, and no chunk, spans both regions.
  const Placement placement_;
  Heap heap_;
  StreamCaches caches_;
  Remapper remapper_;
  const bool remap_;
  GrowthBudget budget_;  ///< its remapping credit guarded by the heap lock
  SlowPathStats stats_;  ///< guarded by the heap lock

  std::atomic<std::uint64_t> release_threshold_;
  std::atomic<bool> reuse_follow_event_dependencies_;
  std::atomic<bool> reuse_allow_opportunistic_;
  std::atomic<bool> reuse_allow_internal_dependencies_;
  const bool check_streams_;
  std::uint64_t activity_seen_ = ~std::uint64_t{0};  ///< the release worker's
  /// Graph memory, taken from this pool on a stream of its own (graph_pool.hpp).
  PoolGraphs graphs_{*this};
  /// Near last: destroyed before the arena, its copies drained while the arena still stands.
  PoolSleep sleep_;
  /// Last: its thread stopped (by ~PoolCore, first) before sleep_ goes.
  SleepPinAhead pin_ahead_;
};

}  // namespace sova::detail
