// PoolCore: the pool's machinery behind sova::Pool.
//
// Structure (details in docs/design.md):
//   * per-stream exact-size caches (StreamState::cache): the fast path. An
//     allocation whose rounded size is cached on its stream pops it under
//     that stream's spin lock; a free pushes onto the freeing stream's cache.
//     No lock shared between streams, no CUDA call, no virtual call.
//     Budget: ~20 ns each way on the H100's host.
//   * the heap: every free block of the VA range, coalesced, in one best-fit
//     set, under one mutex. Frees not yet known complete are kept apart, as
//     ranges per freeing stream (PendingRanges): only that stream may use
//     them, others after a fence, and no chunk under them moves.
//   * the slow path, a ladder tried in order until one step yields a block:
//       1. this stream's own cache flushed into the heap (coalesced); the
//          best fit over the whole free VA that this stream may use, if backed
//       2. other streams' frees known complete (opportunistic reuse), again
//       3. (the step 5 wait first, when the pool holds more free than used)
//       4. grow: back that best fit (remapping free chunks beyond the growth
//          budget), releasing free physical memory if the device is full
//       5. another stream's fenced frees, with a wait inserted (internal
//          dependencies) — after growth, not before: a wait ties this stream
//          to another's running work, growth costs once (docs/design.md)
//       6. synchronize the device, so every free is complete; retry 1-5
//       7. out of memory: everything as it was
#pragma once

#include "arena/arena.hpp"
#include "core/block.hpp"
#include "core/block_map.hpp"
#include "core/block_pool.hpp"
#include "core/free_index.hpp"
#include "core/growth_budget.hpp"
#include "core/heap_mutex.hpp"
#include "core/pointer_status.hpp"
#include "core/placement.hpp"
#include "core/slow_path_stats.hpp"
#include "core/stream_state.hpp"

#include <sova/pool.hpp>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

namespace sova::detail {

// Tuning constants: one line each on what it bounds; the measurements behind
// the values are in docs/design.md, section "Tuning constants".

/// Best-fit candidates the heap offers the placement policy before giving up.
inline constexpr int kBackedScan = kPlaceCandidates;
/// Other streams' pending ranges a placement steps over in one free block.
inline constexpr int kPendingSkips = 4;
/// Large frees and a stream's own misses record a fence at most this often.
inline constexpr std::int64_t kFenceIntervalNs = 1'000'000;
/// A stream asks for a fence every this many pending ranges staged between two fences.
inline constexpr std::size_t kFenceEveryStaged = 1024;
/// A stream with no allocation or free for this long counts as inactive.
inline constexpr std::int64_t kActivityWindowNs = 200'000'000;
/// The release worker synchronizes for inactive streams at most this often per pool.
inline constexpr std::int64_t kReclaimIntervalNs = 1'000'000'000;
/// The fast path serves larger blocks only when they are the block the stream freed last.
inline constexpr std::size_t kLargestCachedBlock = std::size_t{4} << 20;
/// The used high-water mark is sampled at one slow-path allocation in this many per thread.
inline constexpr std::uint32_t kUsedSampleEvery = 16;

/// A block chosen for a request, and where in it the request is placed.
struct Fit {
  Block* block = nullptr;
  std::size_t at = 0;
};

class PoolCore {
 public:
  explicit PoolCore(const PoolOptions& options);
  ~PoolCore();
  PoolCore(const PoolCore&) = delete;
  PoolCore& operator=(const PoolCore&) = delete;

  cudaError_t allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  cudaError_t deallocate(void* ptr, cudaStream_t stream) noexcept;
  cudaError_t trim_to(std::size_t bytes_to_keep) noexcept;
  /// Pool::stream_synchronized: everything freed on `stream` so far is complete.
  cudaError_t stream_synchronized(cudaStream_t stream) noexcept;
  /// Called by the release worker every kReleasePeriod: if no allocation or
  /// free happened since the last call, releases memory above the release
  /// threshold whose frees are known complete (release_worker.hpp says why).
  void release_if_idle() noexcept;
  /// Called by the release worker every kReleasePeriod, before
  /// release_if_idle: marks each stream state active if its stream allocated
  /// or freed in the last kActivityWindowNs (retired states never are), sets
  /// active_streams_; then, where an inactive state holds frees that no fence
  /// covers, synchronizes the device on the worker's thread and makes them
  /// known complete, so that the other streams can reuse their memory. A
  /// program that destroys a stream does not tell the pool, and no fence can
  /// be recorded on a handle that may be gone: without this, such frees (and
  /// the blocks the stream kept) stayed out of reach until an out-of-memory
  /// synchronize or a trim — a stream made anew for each run of a loop found
  /// its predecessors' last frees in its way and missed, and the pool grew
  /// (threads_mixed on the H100: 20-32 MiB reserved for 2 MiB live after a
  /// few runs, 2026-11-24).
  void track_stream_activity() noexcept;

  cudaError_t set_attribute(cudaMemPoolAttr attr, const void* value) noexcept;
  cudaError_t get_attribute(cudaMemPoolAttr attr, void* value) noexcept;
  cudaError_t set_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept;
  cudaError_t get_access(cudaMemAccessFlags* flags, const cudaMemLocation* location) noexcept;

  PoolStats stats();
  std::string describe();  ///< one line of statistics, for error messages
  void check_invariants();  ///< throws sova::Error on the first broken invariant

  bool contains(const void* ptr) const noexcept {
    return arena_.contains(reinterpret_cast<std::uintptr_t>(ptr));
  }
  std::size_t block_size(const void* ptr) const noexcept;
  /// What `ptr` is to this pool (a live block, inside one, freed, foreign),
  /// for the message of a refused free (pool_core_pointer_status.cpp). Takes
  /// the heap lock and walks the blocks in address order from map_.find(0):
  /// error paths only. Needs, wherever the heap moves: the block map, the
  /// blocks' address-order links (prev/next), their state and requested size,
  /// and the heap lock that guards their shape.
  PointerStatus pointer_status(const void* ptr);
  /// Pool::chunks_under (pool_core_views.cpp): under the heap lock.
  cudaError_t chunks_under(const void* ptr, std::size_t bytes, std::vector<Pool::ChunkView>* out);
  const Arena& arena() const noexcept { return arena_; }  ///< base, size, granularity, props: fixed for life
  int device() const noexcept { return device_; }
  Driver& driver() const noexcept { return driver_; }

 private:
  // ---- streams (pool_core_streams.cpp) -----------------------------------
  StreamState* stream_state(cudaStream_t stream) noexcept;
  StreamState* stream_state_slow(cudaStream_t stream) noexcept;
  /// cudaErrorStreamCaptureUnsupported when `stream` is being captured, the
  /// driver's error for an invalid handle, else cudaSuccess.
  cudaError_t refuse_capture(cudaStream_t stream) noexcept;
  /// The state for `stream` when its handle now names another stream than
  /// `state` was made for (a destroyed stream's handle, reused): `state` is
  /// retired with its cached blocks, a fresh state takes the key. nullptr when
  /// host memory runs out.
  StreamState* renew_stream_state(StreamState* state, unsigned long long id) noexcept;
  std::vector<StreamState*> all_streams();
  /// The same, streams_mutex_ held by the caller.
  std::vector<StreamState*> all_streams_locked();
  /// Closes `state`'s epoch with an event recorded on `stream`. state->lock held.
  void record_fence_locked(StreamState* state, cudaStream_t stream) noexcept;
  /// Every free made on `state`'s stream so far is complete (the stream was
  /// synchronized): closes the open epoch and marks all safe,
  /// returning the fences' events. state->lock held.
  void mark_frees_complete_locked(StreamState* state) noexcept;
  /// Closes `s`'s open epoch if it holds frees; returns the last epoch that
  /// a synchronize begun now completes. s->lock held.
  std::uint64_t close_epoch_locked(StreamState* s) noexcept;
  /// After a synchronize: every epoch up to `cutoff` is complete; retires the
  /// fences that covers. Returns the new safe epoch. s->lock held.
  std::uint64_t mark_complete_through_locked(StreamState* s, std::uint64_t cutoff) noexcept;
  /// Polls `state`'s fences, advancing safe_epoch. state->lock held.
  void poll_fences_locked(StreamState* state) noexcept;
  EventHandle acquire_event() noexcept;
  void return_event(EventHandle event) noexcept;

  // ---- the heap (pool_core_heap.cpp); heap_mutex_ held ----------------------
  /// Makes `block` free and merges it with its free neighbours.
  void insert_free(Block* block) noexcept;
  /// Whether address neighbours `left` and `right` must be one block: both
  /// free, and not on either side of the policy's region boundary.
  bool merges_with(const Block* left, const Block* right) const noexcept;
  /// Merges `right` into its address neighbour `left`; `right` is recycled.
  /// Neither may be in a free set.
  void join(Block* left, Block* right) noexcept;
  void erase_free(Block* block) noexcept;
  /// The first of up to kBackedScan free blocks of at least `size` bytes, in
  /// best-fit order, backed or not, where the policy places the request clear
  /// of other streams' pending frees; the largest block (the never-used tail)
  /// is tried last as well. The caller backs what the placement lacks.
  Fit best_fit(StreamState* user, std::size_t size) noexcept;
  /// Where the last pending free of a stream other than `user` overlapping
  /// the range ends; 0 when none overlaps (nullptr: any stream's).
  std::size_t pending_end_elsewhere(const StreamState* user, std::size_t offset, std::size_t bytes) const noexcept;
  bool pending_elsewhere(const StreamState* user, std::size_t offset, std::size_t bytes) const noexcept {
    return pending_end_elsewhere(user, offset, bytes) != 0;
  }
  /// Where in `block` the policy places `size` bytes clear of other streams'
  /// pending frees: after them, when the policy's place overlaps one (up to
  /// kPendingSkips times); PlacementPolicy::kNoFit when nowhere.
  std::size_t place_clear_of_pending(StreamState* user, const Block* block, std::size_t size,
                                     bool relaxed) const noexcept;
  /// Removes `fit.block` from the heap and splits off what lies before
  /// `fit.at` and beyond `size` as free blocks of the same tag; the block then
  /// starts at fit.at. Returns nullptr (nothing changed) when host memory for
  /// a split is lacking.
  Block* carve(Fit fit, std::size_t size) noexcept;
  /// cached -> free; its range pending on `owner` unless `owner_safe_epoch` covers it.
  void take_from_cache(StreamState* owner, std::uint64_t owner_safe_epoch, Block* block) noexcept;
  /// Records a range pending on `owner` (synchronizes the device instead when
  /// host memory for it is lacking). Takes no stream lock.
  void add_pending(StreamState* owner, std::size_t offset, std::size_t bytes, std::uint64_t epoch) noexcept;
  /// Drops `owner`'s pending ranges that `safe_epoch` covers.
  void drop_complete_pending(StreamState* owner, std::uint64_t safe_epoch) noexcept;

  // ---- the slow path (pool_core_slow.cpp) -----------------------------------
  cudaError_t allocate_slow(void** ptr, std::size_t bytes, std::size_t size, std::size_t need,
                            StreamState* state, cudaStream_t stream) noexcept;
  /// Steps 1 and 2 of the ladder; `step` says which served the block.
  Block* find_without_growth(std::size_t size, std::size_t need, StreamState* state, SlowStep* step) noexcept;
  /// Which cached blocks a miss moves into the heap.
  enum class CacheFlush {
    all,
    /// all but small blocks of recurring sizes (SizeBins::note_allocation),
    /// while those hold at most kKeptSmallCacheBytes; else all
    all_but_recurring_small,
  };
  /// Before a miss takes the heap lock: records a fence on `stream` when one
  /// is due (the caller is that stream's own allocation) and polls the
  /// stream's fences. Outside the heap lock because both are driver calls
  /// (0.4 us each on the H100, more when 16 threads call the driver at once),
  /// and every other thread's miss waited for them. state->lock only.
  void refresh_own_fences(StreamState* state, cudaStream_t stream) noexcept;
  /// Moves `state`'s cached blocks of class `which` into the heap (as far as
  /// refresh_own_fences last found them complete), and drops its pending
  /// ranges whose frees are complete.
  void flush_cache_to_heap(StreamState* state, CacheFlush which) noexcept;
  /// Moves other streams' frees known complete into the heap (without their
  /// kept blocks unless `kept_too`); requests fences where frees are not yet
  /// covered by one.
  void harvest_streams(StreamState* except, bool kept_too = true) noexcept;
  Block* take_with_wait(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream) noexcept;
  cudaError_t grow(std::size_t size, std::size_t need, StreamState* state, cudaStream_t stream, Block** out) noexcept;
  /// Backs the first `need` bytes of `block` (carved, not yet handed out for
  /// `state`'s `stream`): beyond the growth budget, from free memory first
  /// (cover_from_free_memory); new chunks for the rest, safe free memory
  /// released if the device is full. On failure the moved chunks are moved
  /// back where they were (a chunk that cannot be is left as backed free
  /// memory of the block, or released) and nothing new is created.
  cudaError_t back_block(Block* block, std::size_t need, StreamState* state, cudaStream_t stream) noexcept;
  /// Synchronizes `stream` (the caller's own, so its handle is valid), after
  /// which every free made on it before the call is complete: its pending
  /// ranges go, and the chunks under them may be remapped. Called only where
  /// the pool would otherwise create memory beyond its growth budget, so a
  /// program whose layout repeats pays it while its peak is being found,
  /// not every step. The host waits while the stream's queued work drains
  /// (the GPU keeps working; the host's lead is what is lost). Without it a single-stream program's remapping found
  /// nothing to move on the GPU: its frees of the last millisecond were never
  /// known complete when it grew (an LSTM's replay: 1.27x peak reserved over
  /// live without, 1.06x with; docs/notes/2026-11-22-h100-held-out-traces.md).
  void wait_for_own_frees(StreamState* state, cudaStream_t stream) noexcept;

  // ---- remapping (pool_core_remap.cpp); heap_mutex_ held -----------------------
  struct ChunkMove {
    std::int32_t slot;
    std::size_t from_granule;
  };
  /// Moves whole chunks lying in free blocks safe for `user` (the allocating
  /// stream: its own pending frees allowed, each move then pinning the
  /// place it leaves, pin_for) under the unbacked granules of [offset,
  /// offset + bytes): first those with a ghost there (free: no driver call,
  /// Arena), then largest first where they fit; appends each move to
  /// `moves`. At most `max_moves` moves that map anew. Best effort. Returns
  /// how many moves mapped anew (what remapping pays for).
  std::size_t remap_free_chunks_into(StreamState* user, std::size_t offset, std::size_t bytes, std::size_t max_moves,
                                     std::vector<ChunkMove>& moves) noexcept;
  /// The chunks lying wholly inside free blocks that no pending free of a
  /// stream other than `user` overlaps (nullptr: of any stream): what may
  /// move for `user` (nullptr: be released), into `out` (cleared first).
  /// Throws std::bad_alloc.
  void safe_free_chunks(const StreamState* user, std::vector<Arena::ChunkRef>& out);
  /// The pin of a move of `chunk` for `user`: the latest epoch of `user`'s
  /// pending frees overlapping where it lies (none: no pin).
  Arena::GhostPin pin_for(StreamState* user, const Arena::ChunkRef& chunk) const noexcept;
  /// Arena's GhostSettler: makes the pin's frees complete (a poll of the
  /// owner's fences, else a wait for the fence that covers them, else a
  /// device synchronize). Heap lock held.
  bool settle_ghost(const Arena::GhostPin& pin) noexcept;
  /// Releases safe free chunks, at most `max_chunks`, so that `missing`
  /// bytes can be created without reserved memory growing: the smallest
  /// chunk that covers them, else the largest until they are covered.
  /// Returns the chunks released.
  std::size_t release_for_gap(std::size_t missing, std::size_t max_chunks) noexcept;
  /// Moves the chunks of `moves` back, last first (their old ranges are still free).
  void undo_moves(const std::vector<ChunkMove>& moves) noexcept;
  /// Beyond the growth budget (remap_ only), so that backing [offset,
  /// offset + need) does not raise reserved memory while free memory could
  /// pay for it, in order of cost:
  ///   1. free chunks whose frees are known complete are moved under it;
  ///   2. if granules are still missing and the stream's own pending frees
  ///      may hold chunks, wait_for_own_frees, and move again;
  ///   3. if granules are still missing (the free chunks left are larger
  ///      than the gaps, or pinned), safe free chunks of at least that size
  ///      are released, so the chunks created for the gaps replace them.
  /// Without step 3 every pass of a program whose steps vary (an LSTM over
  /// varying lengths) created a few small chunks that no free one could
  /// fill, and reserved memory crept up pass after pass (1.026x to 1.055x).
  void cover_from_free_memory(std::size_t offset, std::size_t need, StreamState* state, cudaStream_t stream,
                              std::vector<ChunkMove>& moves) noexcept;
  /// GrowthBudget::allows for backing [offset, offset + need), with this
  /// pool's figures (the live peak including this request, stranded bytes).
  bool within_growth_budget(std::size_t offset, std::size_t need) noexcept;
  /// GrowthBudget::slack with this pool's active streams.
  std::uint64_t growth_slack(std::uint64_t live_peak) const noexcept {
    return GrowthBudget::slack(live_peak, active_streams_.load(std::memory_order_relaxed));
  }
  static bool cache_serves(const StreamState* state) noexcept {
    return GrowthBudget::cache_serves(state->fast_hits.load(std::memory_order_relaxed),
                                      state->allocations.load(std::memory_order_relaxed));
  }
  bool keeps_small_caches(const StreamState* state) const noexcept {
    return GrowthBudget::keeps_small_caches(active_streams_.load(std::memory_order_relaxed),
                                            used_high_sampled_.load(std::memory_order_relaxed),
                                            cache_serves(state));
  }
  std::size_t kept_cache_bound(const StreamState* state) const noexcept {
    return GrowthBudget::kept_cache_bound(cache_serves(state), active_streams_.load(std::memory_order_relaxed),
                                          used_high_sampled_.load(std::memory_order_relaxed));
  }
  /// Whether any stream caches blocks or has frees pending in the heap. Heap lock held.
  bool frees_held_anywhere() noexcept;
  /// Synchronizes the device; afterwards every free made so far is complete.
  void synchronize_everything() noexcept;
  /// Synchronizes the pool's device and every other device a free of this
  /// pool was made on (foreign_devices_): what a free
  /// not covered by a fence needs before it counts as complete. A free on
  /// another device's stream is accepted, as cudaFreeAsync accepts it, and
  /// its stream's work there may still use the memory.
  cudaError_t synchronize_devices() noexcept;
  /// Where the system has several devices: marks `state` foreign, and notes
  /// the device, when `stream` (for the implicit handles, the calling
  /// thread's current device's) is not on the pool's device. Called by each
  /// free before it touches `state`: one cuStreamGetDevice where the system
  /// has several devices (asked at every free: a destroyed stream's handle
  /// may come back as a stream of another device, and a free does not renew
  /// the state), nothing where it has one.
  void note_stream_device(StreamState* state, cudaStream_t stream) noexcept {
    if (!several_devices_) return;
    int device = -1;  // unknown: every device
    if (driver_.stream_device(stream, &device) != cudaSuccess) device = -1;
    if (device != device_) note_foreign(state, device);
  }
  void note_foreign(StreamState* state, int device) noexcept;
  /// Closes `states`' epochs, synchronizes the device, then marks every free
  /// stamped before it complete and thaws the states. False (nothing marked)
  /// when the synchronize fails or host memory runs out. No heap lock needed.
  bool synchronize_streams(const std::vector<StreamState*>& states) noexcept;
  /// Makes a block taken by the slow path live for `state`; `grown`: the
  /// allocation created or remapped memory (the used high-water mark is
  /// sampled then, and one in kUsedSampleEvery otherwise).
  void hand_out(Block* block, std::size_t bytes, StreamState* state, bool grown) noexcept;
  /// A free range's view for the policy.
  static FreeRange range_of(const Block* block) noexcept { return FreeRange{block->offset, block->size}; }

  // ---- release (pool_core_release.cpp); heap_mutex_ held ---------------------
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

  std::uint64_t activity_seen_ = ~std::uint64_t{0};  ///< release worker only

  // ---- statistics (pool_core_stats.cpp) ---------------------------------------
  std::uint64_t used_now() noexcept;
  void sample_used_high() noexcept;

  Driver& driver_;
  const int device_;
  DeviceInfo info_;
  const std::uint64_t uid_;  ///< never reused: keys the threads' stream caches
  Arena arena_;
  BlockMap map_;
  /// Where the policy's regions meet (region_boundary(), 0: one region), free
  /// blocks are never merged, so no block, and no chunk, spans both regions.
  const Placement placement_;
  const bool remap_;
  /// The growth budget and the remapping credit (guarded by the heap lock).
  GrowthBudget budget_;

  HeapMutex heap_mutex_;
  BlockPool blocks_;
  FreeIndex free_;  ///< every free block of the heap
  /// Remapping's working lists (guarded by the heap lock): kept between
  /// growths so that a growth allocates nothing once they have grown (each
  /// growth allocated and freed two or more vectors: malloc and free were in
  /// callgrind's profile of lstm_train's growths).
  std::vector<Arena::ChunkRef> donor_scratch_;
  std::vector<std::pair<std::size_t, std::size_t>> run_scratch_;
  /// The streams whose `pending` is not empty (what best_fit checks).
  std::vector<StreamState*> pending_streams_;

  std::mutex streams_mutex_;
  std::unordered_map<std::uintptr_t, std::unique_ptr<StreamState>> streams_;
  /// States of destroyed streams whose handles were reused: still holding
  /// cached and pending blocks, reclaimed through fences and synchronizes.
  std::vector<std::unique_ptr<StreamState>> retired_streams_;
  /// States ever made, retired ones included: while it is 1, the one stream's
  /// own high-water mark is the pool's (stats()).
  std::atomic<std::size_t> stream_count_{0};
  /// Streams that allocated or freed in the last kActivityWindowNs, as
  /// track_stream_activity last found, plus streams made since: what the
  /// miss rules that depend on sharing read (keeps_small_caches, the growth
  /// budget's slack). A state stays in the pool after its stream is
  /// destroyed (the pool is not told), so counting every state made a lone
  /// stream, created anew for each of a benchmark's runs, follow the rules
  /// for a shared pool.
  std::atomic<std::size_t> active_streams_{0};
  std::int64_t reclaimed_ns_ = 0;  ///< the release worker's last synchronize for inactive streams
  /// Bytes cached by states whose streams are retired or inactive
  /// (StreamState::strands_cache; never the legacy stream's): memory no
  /// active stream can take until the release worker's synchronize completes
  /// its frees (up to kActivityWindowNs + kReclaimIntervalNs). The growth
  /// budget leaves it out (within_growth_budget says why). Set by
  /// track_stream_activity every period; raised when a state is retired
  /// (renew_stream_state), lowered when a miss takes such blocks
  /// (harvest_streams), so that it holds between the worker's looks. A hint,
  /// as active_streams_ is.
  std::atomic<std::uint64_t> stranded_bytes_{0};
  /// stranded_bytes_ -= bytes, down to 0 at most.
  void unstrand(std::uint64_t bytes) noexcept;
  /// Counts the bytes cached by states that strand their cache (each state's lock
  /// taken in turn), stores the count in stranded_bytes_ unless it changed
  /// meanwhile, and returns it: track_stream_activity's recount.
  std::uint64_t recount_stranded_bytes() noexcept;
  /// Every state ever made, retired ones included, newest first, linked
  /// through StreamState::older: read without a lock (states live as long as
  /// the pool), so that used_now() on the slow path takes no mutex.
  std::atomic<StreamState*> all_states_{nullptr};
  /// Calls visit(state) for every state, newest first; no lock, no allocation.
  template <class Visit>
  void for_each_state(Visit visit) const {
    for (StreamState* s = all_states_.load(std::memory_order_acquire); s != nullptr; s = s->older) visit(s);
  }
  /// Publishes a state made under streams_mutex_.
  void publish_state(StreamState* state) noexcept {
    state->older = all_states_.load(std::memory_order_relaxed);
    all_states_.store(state, std::memory_order_release);
  }

  std::mutex events_mutex_;
  std::vector<EventHandle> spare_events_;  ///< capacity >= events_made_ (return_event cannot fail)
  std::size_t events_made_ = 0;            ///< guarded by events_mutex_

  std::atomic<std::uint64_t> release_threshold_;
  std::atomic<bool> reuse_follow_event_dependencies_;
  std::atomic<bool> reuse_allow_opportunistic_;
  std::atomic<bool> reuse_allow_internal_dependencies_;
  const bool check_streams_;
  /// The driver has more than one device: streams may be another device's.
  const bool several_devices_;
  /// The devices other than the pool's that frees were made on,
  /// one bit each (bit 63: device 63 or later, or unknown: every device).
  std::atomic<std::uint64_t> foreign_devices_{0};

  SlowPathStats stats_;  ///< the heap lock's, but events_recorded
  /// The used high-water mark, sampled (hand_out): what the growth budget reads.
  std::atomic<std::uint64_t> used_high_sampled_{0};
};

}  // namespace sova::detail
