// StreamRegistry: what a pool knows of the streams it has seen — one
// StreamState per stream handle (stream_state.hpp), the states retired when a
// destroyed stream's handle came back, which streams are active, the memory
// quiet streams' caches strand — and the fences that make their frees known
// complete (epochs, events, synchronizes).
//
// It is StreamCaches' part that finds states and completes their frees
// (stream_caches.hpp); only StreamCaches calls it.
// It owns the states (under its mutex; read lock-free through the list of
// every state ever made, which lives as long as the pool), the spare events
// (under the events' mutex) and the devices other than the pool's that frees
// were made on. Each state's own fields are guarded by the state's spin lock;
// the *_locked members expect it held. Lock order: the pool's heap lock, then
// this registry's mutex, then a state's lock; the events' mutex last, alone.
#pragma once

#include "core/stream_state.hpp"

#include <sova/driver.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sova::detail {

/// Large frees and a stream's own misses record a fence at most this often
/// (docs/design.md, "Tuning constants").
inline constexpr std::int64_t kFenceIntervalNs = 1'000'000;
/// A stream with no allocation or free for this long counts as inactive.
inline constexpr std::int64_t kActivityWindowNs = 200'000'000;

class StreamRegistry {
 public:
  /// `check_streams`: PoolOptions::check_streams (states record their
  /// stream's id, to tell a reused handle).
  StreamRegistry(Driver& driver, int device, bool check_streams);
  /// Destroys every event. The caller has synchronized the devices.
  ~StreamRegistry();
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // ---- finding a stream's state -------------------------------------------------

  /// The state for `stream`, made on first use; nullptr, with `*error` (where
  /// given) set, when `stream` is refused — judged only when it has no state
  /// yet (judge_stream, stream_check.hpp), nothing made for it — or when host
  /// memory runs out (cudaErrorMemoryAllocation). The calling thread's most
  /// recent stream of this pool is one thread-local compare away (the fast
  /// path); the next three a short scan; a known stream is never judged again.
  StreamState* find(cudaStream_t stream, cudaError_t* error = nullptr) noexcept;
  /// The state for `stream` when its handle now names another stream (id
  /// `id`) than `state` was made for (a destroyed stream's handle, reused):
  /// `state` is retired with its cached blocks, a fresh state takes the key.
  /// nullptr when host memory runs out.
  StreamState* renew(StreamState* state, unsigned long long id) noexcept;

  // ---- every state -------------------------------------------------------------

  /// Calls visit(state) for every state ever made, retired ones included,
  /// newest first; no lock, no allocation.
  template <class Visit>
  void for_each_state(Visit visit) const {
    for (StreamState* s = newest(); s != nullptr; s = s->older) visit(s);
  }
  StreamState* newest() const noexcept { return all_states_.load(std::memory_order_acquire); }
  /// Every state, retired ones included. Throws std::bad_alloc.
  std::vector<StreamState*> all();
  /// The same, mutex() held by the caller.
  std::vector<StreamState*> all_locked();
  std::mutex& mutex() noexcept { return mutex_; }
  /// Allocations and frees so far on the streams' current states.
  std::uint64_t activity();
  /// States ever made, retired ones included.
  std::size_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  std::size_t retired_count();
  /// Requested bytes live over every state, retired ones included (a block
  /// allocated on a destroyed stream may be freed on the new stream with its
  /// handle). No lock.
  std::uint64_t live_bytes() const noexcept;

  // ---- activity: hints the miss rules read -----------------------------------------

  /// Streams that allocated or freed in the last kActivityWindowNs, as the
  /// release worker last found (set_active), plus streams made since.
  std::size_t active() const noexcept { return active_.load(std::memory_order_relaxed); }
  void set_active(std::size_t streams) noexcept { active_.store(streams, std::memory_order_relaxed); }
  /// Bytes cached by states whose streams are retired or inactive
  /// (StreamState::strands_cache): memory no active stream can take until
  /// its frees are known complete (the release worker's wait on their fences,
  /// or the out-of-memory path's or a trim's synchronize). Set by
  /// recount_stranded every period; raised when a state is retired, lowered
  /// when a miss takes such blocks (unstrand).
  std::uint64_t stranded() const noexcept { return stranded_.load(std::memory_order_relaxed); }
  /// stranded() -= bytes, down to 0 at most.
  void unstrand(std::uint64_t bytes) noexcept;
  /// Counts the bytes cached by states that strand their cache (each state's
  /// lock taken in turn), stores the count unless it changed meanwhile, and
  /// returns it.
  std::uint64_t recount_stranded() noexcept;

  // ---- devices -----------------------------------------------------------------------

  /// Where the system has several devices, sets `state->device` from the
  /// driver for `stream`, a live created stream (under capture or not), and
  /// marks the state foreign when it is another device's.
  void learn_device(StreamState* state, cudaStream_t stream) noexcept;
  /// Which device this pool found `stream` on (StreamState::device): -1
  /// where not known. No driver call.
  int known_device(cudaStream_t stream) noexcept {
    const StreamState* state = find(stream);
    return state != nullptr ? state->device.load(std::memory_order_relaxed) : -1;
  }
  /// Synchronizes the pool's device and, where the system has several, every
  /// other device this process uses: what a free not covered by a fence
  /// needs before it counts as complete (a free may have been made on any
  /// device's stream, and a free does not ask which: learn_device).
  cudaError_t synchronize_devices() noexcept;

  // ---- fences: epochs made complete ----------------------------------------------------

  /// Closes `state`'s epoch with an event recorded on `stream`. state->lock held.
  void record_fence_locked(StreamState* state, cudaStream_t stream) noexcept;
  /// Every free made on `state`'s stream so far is complete (the stream was
  /// synchronized): closes the open epoch and marks all safe. state->lock held.
  void mark_frees_complete_locked(StreamState* state) noexcept;
  /// Closes `s`'s open epoch if it holds frees; returns the last epoch that
  /// a synchronize begun now completes. s->lock held.
  std::uint64_t close_epoch_locked(StreamState* s) noexcept;
  /// After a synchronize: every epoch up to `cutoff` is complete; retires the
  /// fences that covers. Returns the new safe epoch. s->lock held.
  std::uint64_t mark_complete_through_locked(StreamState* s, std::uint64_t cutoff) noexcept;
  /// Polls `state`'s fences, advancing safe_epoch. state->lock held.
  void poll_fences_locked(StreamState* state) noexcept;
  /// Makes every free stamped on `states` so far complete and thaws the
  /// states. Where each free is covered by a fence, by waiting for those
  /// fences alone (events: no capture minds them); where a state has frees no
  /// fence covers (its open epoch: its stream made no call since, and its
  /// handle may be destroyed, so it is never asked), by a synchronize of the
  /// devices, which invalidates any capture running on them, sova's or not
  /// (docs/graphs.md, "Captures sova does not know"). False (nothing marked)
  /// when a wait fails, host memory runs out, or a device synchronize would
  /// be needed while a capture that allocated here is open. No lock held.
  bool synchronize(const std::vector<StreamState*>& states) noexcept;
  /// Whether any of `states` holds frees no fence covers (synchronize would
  /// synchronize the devices for them). Polls their fences.
  bool any_unfenced(const std::vector<StreamState*>& states) noexcept;
  /// Where every free of `states` is fenced (any_unfenced false): waits for
  /// each state's newest fence, marks their frees complete and thaws them.
  /// Events only: no capture minds it. False when a wait fails or host memory
  /// runs out.
  bool wait_fences(const std::vector<StreamState*>& states) noexcept;
  /// While `*open` is not 0, synchronize() fails at once instead: a device
  /// synchronize would invalidate a graph capture in progress
  /// (graph_memory.hpp). Set once, by the pool, before any use.
  void pause_synchronizes_while(const std::atomic<std::size_t>* open) noexcept { captures_open_ = open; }
  /// Makes `owner`'s frees up to `epoch` complete: a poll of its fences,
  /// else a wait for the fence that covers them, else a device synchronize
  /// (`*waited` set for either). False when that fails.
  bool complete_through(StreamState* owner, std::uint64_t epoch, bool* waited) noexcept;
  std::uint64_t events_recorded() const noexcept { return events_recorded_.load(std::memory_order_relaxed); }

 private:
  StreamState* find_slow(cudaStream_t stream, cudaError_t* error) noexcept;
  void publish(StreamState* state) noexcept {
    state->older = all_states_.load(std::memory_order_relaxed);
    all_states_.store(state, std::memory_order_release);
  }

  EventHandle acquire_event() noexcept;
  void return_event(EventHandle event) noexcept;

  Driver& driver_;
  const int device_;
  const bool check_streams_;
  const std::atomic<std::size_t>* captures_open_ = nullptr;  ///< pause_synchronizes_while
  /// The driver has more than one device: streams may be another device's.
  const bool several_devices_;
  const std::uint64_t uid_;  ///< never reused: keys the threads' recent streams

  std::mutex mutex_;
  std::unordered_map<std::uintptr_t, std::unique_ptr<StreamState>> states_;
  /// States of destroyed streams whose handles were reused: still holding
  /// cached and pending blocks, reclaimed through fences and synchronizes.
  std::vector<std::unique_ptr<StreamState>> retired_;
  std::atomic<std::size_t> count_{0};
  std::atomic<std::size_t> active_{0};
  std::atomic<std::uint64_t> stranded_{0};
  /// Every state ever made, newest first, linked through StreamState::older.
  std::atomic<StreamState*> all_states_{nullptr};

  std::mutex events_mutex_;
  std::vector<EventHandle> spare_events_;  ///< capacity >= events_made_ (return_event cannot fail)
  std::size_t events_made_ = 0;            ///< guarded by events_mutex_
  std::atomic<std::uint64_t> events_recorded_{0};
};

}  // namespace sova::detail
