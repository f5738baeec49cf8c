// StreamRegistry (stream_registry.hpp): finding a stream's state, fences,
// events, synchronizes.
#include "core/stream_registry.hpp"

#include "base/implicit_stream.hpp"
#include "base/tls_model.hpp"
#include "core/clock.hpp"
#include "core/stream_check.hpp"

#include <algorithm>

namespace sova::detail {

namespace {

std::atomic<std::uint64_t> g_next_registry_uid{1};

bool has_several_devices(Driver& driver) noexcept {
  int count = 0;
  return driver.device_count(&count) == cudaSuccess && count > 1;
}

// Each thread remembers the stream states it used last, keyed by pool uid
// (never reused, so a destroyed pool's entries can never match). Initial-exec
// TLS: a load off the thread pointer, no __tls_get_addr call on the fast path.
struct RecentStream {
  std::uint64_t pool_uid = 0;
  cudaStream_t stream = nullptr;
  StreamState* state = nullptr;
  int other_device = -1;  ///< other_current_device() when the entry was made
};
constexpr int kRecent = 4;
SOVA_TLS_INITIAL_EXEC thread_local RecentStream t_recent[kRecent];
SOVA_TLS_INITIAL_EXEC thread_local std::uintptr_t t_per_thread_key = 0;
std::atomic<std::uintptr_t> g_next_thread_number{1};

// Keys for cudaStreamPerThread: ...10 in binary, never a real handle (those
// are pointers, aligned to at least 8) nor 0x1/0x2.
std::uintptr_t per_thread_key() noexcept {
  if (t_per_thread_key == 0) t_per_thread_key = (g_next_thread_number.fetch_add(1) << 2) | 0x2;
  return t_per_thread_key;
}

/// For an implicit handle on a system of several devices: the calling
/// thread's current device where it is not the pool's, whose stream the
/// handle then names; else -1.
int other_current_device(Driver& driver, bool several_devices, int pool_device, cudaStream_t stream) noexcept {
  if (!several_devices || !is_implicit_stream(stream)) return -1;
  int device = pool_device;
  if (driver.current_device(&device) != cudaSuccess) return -1;
  return device == pool_device ? -1 : device;
}

/// The state key of `stream`. The implicit handles name the current
/// device's streams, so with another device than the pool's current
/// (`other_device` >= 0) they get keys of their own: ...001 above
/// kLegacyKey for the legacy stream, ...11 for the per-thread stream (real
/// handles are aligned to 8; kLegacyKey is 0x1, per-thread keys ...10).
/// One state for both devices' legacy streams handed a free on one to the
/// other at once, unordered.
std::uintptr_t canonical_key(cudaStream_t stream, int other_device) noexcept {
  const auto value = reinterpret_cast<std::uintptr_t>(stream);
  const auto other = static_cast<std::uintptr_t>(other_device + 1);
  if (value == 0 || value == reinterpret_cast<std::uintptr_t>(cudaStreamLegacy)) {
    return other_device < 0 ? kLegacyKey : kLegacyKey | (other << 3);
  }
  if (value == reinterpret_cast<std::uintptr_t>(cudaStreamPerThread)) {
    return other_device < 0 ? per_thread_key() : ((per_thread_key() >> 2) << 9) | ((other & 127) << 2) | 0x3;
  }
  return value;
}

// Fences outstanding per stream at most; beyond, the newest is extended
// (record_fence_locked; docs/design.md, "Tuning constants").
constexpr std::size_t kMaxFences = 8;

}  // namespace

StreamRegistry::StreamRegistry(Driver& driver, int device, bool check_streams)
    : driver_(driver),
      device_(device),
      check_streams_(check_streams),
      several_devices_(has_several_devices(driver)),
      uid_(g_next_registry_uid.fetch_add(1)) {}

StreamRegistry::~StreamRegistry() {
  for (auto& entry : states_) {
    for (const Fence& fence : entry.second->fences) driver_.event_destroy(fence.event);
  }
  for (EventHandle event : spare_events_) driver_.event_destroy(event);
}

std::uint64_t StreamRegistry::activity() {
  std::uint64_t activity = 0;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& entry : states_) {
    activity += entry.second->allocations.load(std::memory_order_relaxed) +
                entry.second->deallocations.load(std::memory_order_relaxed);
  }
  return activity;
}

std::size_t StreamRegistry::retired_count() {
  std::lock_guard<std::mutex> lock(mutex_);
  return retired_.size();
}

bool StreamRegistry::complete_through(StreamState* owner, std::uint64_t epoch, bool* waited) noexcept {
  // The owner is a state of this pool (states live as long as it does). Its
  // frees there may be complete already, by a fence the stream recorded.
  EventHandle covering = nullptr;
  {
    std::lock_guard<SpinLock> lock(owner->lock);
    poll_fences_locked(owner);
    if (owner->safe_epoch >= epoch) return true;
    for (const Fence& fence : owner->fences) {
      if (fence.epoch >= epoch) {
        covering = fence.event;
        break;
      }
    }
  }
  *waited = true;
  // A fence covers them: wait for it alone, not for the lock (other threads
  // may free on that stream meanwhile). Should the event be polled, recycled
  // and recorded again by another thread before this waits, it waits longer:
  // still safe.
  if (covering != nullptr && driver_.event_synchronize(covering) == cudaSuccess) {
    std::lock_guard<SpinLock> lock(owner->lock);
    poll_fences_locked(owner);
    if (owner->safe_epoch >= epoch) return true;
  }
  // Else a device synchronize, the one wait valid whatever became of the
  // stream (it may have been destroyed since).
  try {
    return synchronize(std::vector<StreamState*>{owner});
  } catch (const std::bad_alloc&) {
    return false;
  }
}

StreamState* StreamRegistry::find(cudaStream_t stream, cudaError_t* error) noexcept {
  const RecentStream& first = t_recent[0];
  if (first.pool_uid == uid_ && first.stream == stream &&
      (!several_devices_ || first.other_device == other_current_device(driver_, true, device_, stream))) {
    return first.state;
  }
  return find_slow(stream, error);
}

StreamState* StreamRegistry::find_slow(cudaStream_t stream, cudaError_t* error) noexcept {
  StreamState* state = nullptr;
  int hit = -1;
  const int other_device = other_current_device(driver_, several_devices_, device_, stream);
  for (int i = 1; i < kRecent; ++i) {
    if (t_recent[i].pool_uid == uid_ && t_recent[i].stream == stream && t_recent[i].other_device == other_device) {
      state = t_recent[i].state;
      hit = i;
      break;
    }
  }
  if (state == nullptr) {
    const std::uintptr_t key = canonical_key(stream, other_device);
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      auto known = states_.find(key);
      if (known == states_.end()) {
        // A stream this pool has no state for: judged before anything is
        // made for it (stream_check.hpp), so that a refused call changes
        // nothing — no state, no count. The judge's driver call is the one a
        // new state asked anyway (its capture status, before its id).
        bool capturing = false;
        if (const cudaError_t refusal = judge_stream(driver_, stream, check_streams_, &capturing);
            refusal != cudaSuccess) {
          if (error != nullptr) *error = refusal;
          return nullptr;
        }
        auto fresh = std::make_unique<StreamState>();
        fresh->key = key;
        fresh->is_legacy_ = (key & 0x7) == kLegacyKey;  // either device's legacy stream
        if (is_implicit_stream(stream)) {
          fresh->device.store(other_device >= 0 ? other_device : device_, std::memory_order_relaxed);
          if (other_device >= 0) fresh->foreign.store(true, std::memory_order_relaxed);
        } else {
          fresh->device.store(device_, std::memory_order_relaxed);  // learn_device below, with several
        }
        // The id not for a stream under capture: cuStreamGetId refuses it and
        // invalidates the capture (H100, H200). Its id stays 0, and its first
        // allocation outside the capture renews the state with the right id.
        if (check_streams_ && !fresh->is_legacy() && !capturing) driver_.stream_id(stream, &fresh->stream_id_);
        if (!is_implicit_stream(stream)) learn_device(fresh.get(), stream);
        // Counted active before it is published: the release worker's count,
        // if it sees the state, then stores it among the others, and if it
        // does not, stores one too few until its next pass (20 ms) — never
        // one too many.
        known = states_.emplace(key, nullptr).first;  // may throw: nothing published yet
        active_.fetch_add(1, std::memory_order_relaxed);
        publish(fresh.get());
        known->second = std::move(fresh);
        count_.fetch_add(1, std::memory_order_relaxed);
      }
      state = known->second.get();
    } catch (...) {
      if (error != nullptr) *error = cudaErrorMemoryAllocation;
      return nullptr;  // out of host memory
    }
    hit = kRecent - 1;
  }
  // Move to the front, most recent first.
  for (int i = hit; i > 0; --i) t_recent[i] = t_recent[i - 1];
  t_recent[0] = RecentStream{uid_, stream, state, other_device};
  return state;
}

std::vector<StreamState*> StreamRegistry::all() {
  std::lock_guard<std::mutex> lock(mutex_);
  return all_locked();
}

std::vector<StreamState*> StreamRegistry::all_locked() {
  std::vector<StreamState*> states;
  states.reserve(states_.size() + retired_.size());
  for (auto& entry : states_) states.push_back(entry.second.get());
  for (auto& retired : retired_) states.push_back(retired.get());
  return states;
}

StreamState* StreamRegistry::renew(StreamState* state, unsigned long long id) noexcept {
  StreamState* current = nullptr;
  bool newly_stranded = false;  // retired while counted active: its cache was not counted stranded
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unique_ptr<StreamState>& slot = states_[state->key];
    if (slot.get() == state) {
      auto fresh = std::make_unique<StreamState>();
      fresh->key = state->key;
      fresh->stream_id_ = id;
      if ((state->key & 0x7) != 0) {  // an implicit handle: the device is the key's
        fresh->device.store(state->device.load(std::memory_order_relaxed), std::memory_order_relaxed);
        fresh->foreign.store(state->foreign.load(std::memory_order_relaxed), std::memory_order_relaxed);
      } else {
        // A reused handle may name another device's stream: ask, as for a new state.
        fresh->device.store(device_, std::memory_order_relaxed);
        learn_device(fresh.get(), reinterpret_cast<cudaStream_t>(state->key));
      }
      retired_.reserve(retired_.size() + 1);
      slot->retired.store(true, std::memory_order_relaxed);
      // The fresh state is active. Where the retired one was counted active,
      // one replaces one; where it was not (its stream had gone quiet before
      // the handle came back), the fresh one is added, before it is published
      // (find_slow says why).
      newly_stranded = slot->active.exchange(false, std::memory_order_relaxed);
      if (!newly_stranded) active_.fetch_add(1, std::memory_order_relaxed);
      retired_.push_back(std::move(slot));
      publish(fresh.get());
      slot = std::move(fresh);
      count_.fetch_add(1, std::memory_order_relaxed);
    }
    current = slot.get();
  } catch (...) {
    return nullptr;
  }
  // The retired state's open epoch can never be fenced (its stream is gone):
  // its blocks come back through the out-of-memory synchronize or trim (the
  // release worker waits only on fences: StreamCaches::track_activity). Until
  // then its cache is stranded (counted now, not at the worker's next look:
  // the new stream's first misses read it).
  if (newly_stranded) {
    std::lock_guard<SpinLock> lock(state->lock);
    stranded_.fetch_add(state->cache.bytes(), std::memory_order_relaxed);
  }
  for (RecentStream& recent : t_recent) {
    if (recent.pool_uid == uid_ && recent.state == state) recent.state = current;
  }
  return current;
}

void StreamRegistry::learn_device(StreamState* state, cudaStream_t stream) noexcept {
  // Asked only where a handle is known to name a live stream: when a state is
  // made or renewed, and at an allocation under capture (which does not
  // renew: PoolCore::allocate). Driver::stream_device is allowed under
  // capture. A free never asks (a driver call on every
  // free, 1.2-2.6x the replay time with two GPUs visible): a handle reused by
  // another device's stream and only freed on, never allocated on, keeps the
  // old stream's device here. That stays correct: the fences of such a stream
  // cannot be recorded (an event of the pool's device on another device's
  // stream is refused), and the refused record asks again and marks it
  // foreign (record_fence_locked); and every
  // synchronize that completes frees covers every device the process uses
  // (synchronize_devices), whichever device a free was made on.
  // One device: the pool's, set when the state was made; an implicit handle:
  // its key's (find_slow).
  if (!several_devices_ || is_implicit_stream(stream)) return;
  int device = -1;
  if (driver_.stream_device(stream, &device) != cudaSuccess) device = -1;
  state->device.store(device, std::memory_order_relaxed);
  if (device != device_) state->foreign.store(true, std::memory_order_relaxed);
}

cudaError_t StreamRegistry::synchronize_devices() noexcept {
  cudaError_t result = driver_.device_synchronize(device_);
  if (!several_devices_) return result;
  // Every other device: a free on a handle the pool last saw as one of its
  // own device's streams may have been made on a stream of another device
  // since (learn_device). A device the process never used has nothing to wait
  // for, and the driver creates no context for it (Driver::device_synchronize).
  int count = 0;
  if (driver_.device_count(&count) != cudaSuccess) return cudaErrorUnknown;
  for (int device = 0; device < count; ++device) {
    if (device == device_) continue;
    if (const cudaError_t error = driver_.device_synchronize(device); error != cudaSuccess) result = error;
  }
  return result;
}

EventHandle StreamRegistry::acquire_event() noexcept {
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    if (!spare_events_.empty()) {
      EventHandle event = spare_events_.back();
      spare_events_.pop_back();
      return event;
    }
  }
  EventHandle event = nullptr;
  // On the pool's device, whatever the calling thread's current device: the
  // fence is recorded on a stream of the pool's device.
  if (driver_.event_create_on(device_, &event) != cudaSuccess) return nullptr;
  // Room among the spares for every event made, so that return_event never
  // fails, and so never destroys one: an event stays valid as long as the
  // pool (a pinned ghost's settle may wait on a fence's event after another
  // thread has polled and returned it).
  try {
    std::lock_guard<std::mutex> lock(events_mutex_);
    spare_events_.reserve(++events_made_);
  } catch (...) {
    driver_.event_destroy(event);
    return nullptr;  // no fence this time
  }
  return event;
}

void StreamRegistry::return_event(EventHandle event) noexcept {
  std::lock_guard<std::mutex> lock(events_mutex_);
  spare_events_.push_back(event);  // capacity reserved in acquire_event: no throw
}

void StreamRegistry::record_fence_locked(StreamState* state, cudaStream_t stream) noexcept {
  state->fence_requested.store(false, std::memory_order_relaxed);
  state->last_fence_ns = now_ns();
  if (!state->open_epoch_has_frees) return;  // nothing new to cover
  // Frees made on another device's stream: no event of the pool's device
  // covers them (StreamState::foreign); synchronize_devices completes them.
  if (state->foreign.load(std::memory_order_relaxed)) return;
  // No event query here: this runs on the free's fast path (a releasing
  // pool fences every large free), and a query there cost the seed loop
  // 15-32% on the H200 where a record cost 0.5% (tools/probe_fence_cost.cu;
  // a query makes the driver submit the stream's queued work at once). The
  // fences are polled by misses, harvests and the release worker instead.
  // With kMaxFences outstanding, the newest is recorded again and extended to
  // the open epoch: one event per stream then tracks a long fast loop's
  // latest free, and no loop piles up events. Its waiters stay correct: a
  // stream wait (take_fenced) binds the record made before it, and a host
  // wait for an event recorded again meanwhile only waits longer.
  cudaStream_t handle = state->is_legacy() ? cudaStreamLegacy : stream;
  const bool extend = state->fences.size() >= kMaxFences;
  EventHandle event = extend ? state->fences.back().event : acquire_event();
  if (event == nullptr) return;
  // On the pool's device's stream for the implicit handles, whatever the
  // calling thread's current device: StreamCaches::harvest fences the legacy stream
  // from any thread, the release worker's (device 0 current) included.
  if (driver_.event_record_on(device_, event, handle) != cudaSuccess) {
    // A refused record leaves an event as it was: an extended fence keeps its epoch.
    if (!extend) return_event(event);
    // Where the system has several devices, the handle may now name another
    // device's stream (a reused handle only freed on): ask, and mark it foreign.
    learn_device(state, stream);
    return;
  }
  if (extend) {
    state->fences.back().epoch = state->epoch;
  } else {
    try {
      state->fences.push_back(Fence{event, state->epoch});
    } catch (...) {
      // Cannot remember it: the epoch stays open. The event's record is
      // harmless; it goes back to the spares, recorded (a later record resets it).
      return_event(event);
      return;
    }
  }
  ++state->epoch;
  state->open_epoch_has_frees = false;
  events_recorded_.fetch_add(1, std::memory_order_relaxed);
}

void StreamRegistry::mark_frees_complete_locked(StreamState* state) noexcept {
  mark_complete_through_locked(state, close_epoch_locked(state));
  state->fence_requested.store(false, std::memory_order_relaxed);
}

std::uint64_t StreamRegistry::close_epoch_locked(StreamState* s) noexcept {
  if (!s->open_epoch_has_frees) {
    // No free in the open epoch: it must stay open (frees made during or
    // after a synchronize will be stamped with it), so only the epochs
    // before it are complete.
    return s->epoch - 1;
  }
  s->open_epoch_has_frees = false;
  s->closed_unfenced = s->epoch;  // complete once the caller's wait succeeds (mark_complete_through_locked)
  return s->epoch++;  // frees from now on get the next epoch
}

std::uint64_t StreamRegistry::mark_complete_through_locked(StreamState* s, std::uint64_t cutoff) noexcept {
  if (cutoff > s->safe_epoch) s->safe_epoch = cutoff;
  while (!s->fences.empty() && s->fences.front().epoch <= s->safe_epoch) {
    return_event(s->fences.front().event);  // covered: its event is no longer needed
    s->fences.pop_front();
  }
  return s->safe_epoch;
}

void StreamRegistry::poll_fences_locked(StreamState* state) noexcept {
  while (!state->fences.empty()) {
    const Fence fence = state->fences.front();
    if (driver_.event_query(fence.event) != cudaSuccess) break;
    if (fence.epoch > state->safe_epoch) state->safe_epoch = fence.epoch;
    state->fences.pop_front();
    return_event(fence.event);
  }
}

std::uint64_t StreamRegistry::recount_stranded() noexcept {
  std::uint64_t seen = stranded_.load(std::memory_order_relaxed);
  std::uint64_t bytes = 0;
  for_each_state([&](StreamState* s) {
    if (!s->strands_cache()) return;
    if (s->cache.blocks() == 0) return;
    std::lock_guard<SpinLock> lock(s->lock);
    bytes += s->cache.bytes();
  });
  // Stored only if no retirement or miss changed the figure meanwhile: a
  // stale count stored over a retirement's addition would hide that cache
  // until the next period (the figure then stays as they left it).
  stranded_.compare_exchange_strong(seen, bytes, std::memory_order_relaxed);
  return bytes;
}

void StreamRegistry::unstrand(std::uint64_t bytes) noexcept {
  std::uint64_t now = stranded_.load(std::memory_order_relaxed);
  while (!stranded_.compare_exchange_weak(now, now - std::min(now, bytes), std::memory_order_relaxed)) {
  }
}

bool StreamRegistry::any_unfenced(const std::vector<StreamState*>& states) noexcept {
  for (StreamState* s : states) {
    std::lock_guard<SpinLock> lock(s->lock);
    poll_fences_locked(s);
    // The open epoch's frees, or an epoch closed for a synchronize or stream
    // wait that failed (a capture refused it): no fence covers either.
    const std::uint64_t covered = s->fences.empty() ? s->safe_epoch : std::max(s->safe_epoch, s->fences.back().epoch);
    if (s->open_epoch_has_frees || s->closed_unfenced > covered) return true;
  }
  return false;
}

bool StreamRegistry::wait_fences(const std::vector<StreamState*>& states) noexcept {
  // Every free of these states is in a closed epoch, covered by a fence: the
  // newest fence of each covers them all. Events recycled meanwhile (polled
  // and recorded again by another thread) make a wait longer, never unsafe.
  std::vector<EventHandle> newest;
  try {
    newest.reserve(states.size());
  } catch (...) {
    return false;
  }
  for (StreamState* s : states) {
    std::lock_guard<SpinLock> lock(s->lock);
    poll_fences_locked(s);
    if (!s->fences.empty()) newest.push_back(s->fences.back().event);
  }
  for (EventHandle event : newest) {
    if (driver_.event_synchronize(event) != cudaSuccess) return false;
  }
  for (StreamState* s : states) {
    std::lock_guard<SpinLock> lock(s->lock);
    poll_fences_locked(s);
    if (s->fences.empty()) s->frozen.store(false, std::memory_order_relaxed);
  }
  return true;
}

bool StreamRegistry::synchronize(const std::vector<StreamState*>& states) noexcept {
  // Fences first: a device synchronize only where frees have none.
  if (!any_unfenced(states)) return wait_fences(states);
  if (captures_open_ != nullptr && captures_open_->load(std::memory_order_relaxed) != 0) return false;
  std::vector<std::uint64_t> cutoffs;
  try {
    cutoffs.resize(states.size());
  } catch (...) {
    return false;
  }
  // Close every epoch first: frees stamped before the synchronize began are
  // complete once it returns; later ones are not.
  for (std::size_t i = 0; i < states.size(); ++i) {
    std::lock_guard<SpinLock> lock(states[i]->lock);
    cutoffs[i] = close_epoch_locked(states[i]);
  }
  // The pool's device, and every device a free was made on (a free on
  // another device's stream: its work there may still use the memory).
  if (synchronize_devices() != cudaSuccess) return false;
  for (std::size_t i = 0; i < states.size(); ++i) {
    std::lock_guard<SpinLock> lock(states[i]->lock);
    mark_complete_through_locked(states[i], cutoffs[i]);
    states[i]->frozen.store(false, std::memory_order_relaxed);
  }
  return true;
}

std::uint64_t StreamRegistry::live_bytes() const noexcept {
  // Retired states count too: a block allocated on a destroyed stream and
  // freed on the new stream with its handle is counted out on the new one.
  std::int64_t used = 0;
  for (const StreamState* s = all_states_.load(std::memory_order_acquire); s != nullptr; s = s->older) {
    used += s->live_bytes.load(std::memory_order_relaxed);
  }
  return used > 0 ? static_cast<std::uint64_t>(used) : 0;
}

}  // namespace sova::detail
