// StreamCaches (stream_caches.hpp): the release worker's look at the streams
// — which are active, what quiet streams strand and when to take it back —
// and the wait for every free's work before the pool unmaps.
#include "core/stream_caches.hpp"

#include "core/growth_budget.hpp"

namespace sova::detail {

void StreamCaches::track_activity() noexcept {
  const std::int64_t now = now_ns();
  std::size_t active_count = 0;
  std::vector<StreamState*> idle;
  try {
    registry_.for_each_state([&](StreamState* s) {
      const std::uint64_t activity =
          s->allocations.load(std::memory_order_relaxed) + s->deallocations.load(std::memory_order_relaxed);
      if (activity != s->activity_seen || s->last_active_ns == 0) {
        s->activity_seen = activity;
        s->last_active_ns = now;
      }
      const bool is_active = !s->retired.load(std::memory_order_relaxed) && now - s->last_active_ns < kActivityWindowNs;
      s->active.store(is_active, std::memory_order_relaxed);
      active_count += is_active ? 1 : 0;
      // The legacy stream lives as long as the process: harvest fences it
      // itself, unless a free on it was made on another device
      // (StreamState::foreign: no fence covers it).
      if (!is_active && (!s->is_legacy() || s->foreign.load(std::memory_order_relaxed))) {
        std::lock_guard<SpinLock> lock(s->lock);
        if (s->open_epoch_has_frees) idle.push_back(s);
      }
    });
  } catch (...) {
    return;  // out of host memory: next period
  }
  // The count itself, 0 included: a floor of 1 here, with the next new
  // stream's increment on top, made one stream count as two.
  registry_.set_active(active_count);
  const std::uint64_t stranded = registry_.recount_stranded();
  // The interval is waived where the stranded memory exceeds the growth
  // budget's slack: the growth budget leaves it out, so until it comes back
  // the active streams may grow by as much again (threads_mixed with 16
  // streams of 64 sizes made anew every 0.2 s, simulation: 358-428 MiB
  // reserved with the interval kept, 230-318 without, 252-346 before the
  // budget left stranded memory out).
  const bool pressing = stranded > GrowthBudget::slack(used_high(), active());
  if (idle.empty() || (!pressing && reclaimed_ns_ != 0 && now - reclaimed_ns_ < kReclaimIntervalNs)) return;
  reclaimed_ns_ = now;
  // Only what fences cover: the worker never synchronizes a device, which
  // would invalidate any capture running on it, one sova does not know of
  // included (a library's, another thread's; seen on the H200s). Frees no
  // fence covers (a stream that went quiet right after freeing, or was
  // destroyed) come back at the stream's next call, or by the out-of-memory
  // path's or a trim's synchronize. Their blocks, kept ones too (inactive), go
  // to the heap and their pending ranges are dropped.
  if (registry_.any_unfenced(idle) || !registry_.wait_fences(idle)) return;
  std::lock_guard<HeapMutex> heap(heap_.mutex());
  harvest(nullptr);
  registry_.recount_stranded();
}

bool StreamCaches::wait_for_all_work() noexcept {
  // Frees may still be pending on streams, of other devices too (a free is
  // accepted on any device's stream): wait before unmapping anything — for
  // their fences where every free has one, else for the devices
  // (StreamRegistry::synchronize). A live block may still have work queued
  // on it (~Pool waits for the device's outstanding work): then the
  // devices, as for unfenced frees.
  bool waited = false;
  try {
    const std::vector<StreamState*> states = registry_.all();
    waited = registry_.live_bytes() == 0 && !registry_.any_unfenced(states) && registry_.wait_fences(states);
  } catch (...) {
  }
  return waited || registry_.synchronize_devices() == cudaSuccess;
}

}  // namespace sova::detail
