// Giving physical memory back: trim and the release threshold.
#include "core/pool_core.hpp"

#include "core/clock.hpp"

#include <algorithm>
#include <vector>

namespace sova::detail {

std::size_t PoolCore::release_free_memory(std::size_t keep, bool may_cross) noexcept {
  // Largest free blocks first: they hold whole chunks most often.
  std::size_t released = 0;
  // A block with a pending free in it waits: work may still read its chunks.
  for (auto it = heap_.free_blocks().rbegin(); it != heap_.free_blocks().rend() && arena_.backed_bytes() > keep; ++it) {
    if (heap_.pending_elsewhere(nullptr, (*it)->offset, (*it)->size)) continue;
    released += arena_.release_within((*it)->offset, (*it)->size, keep, may_cross);
  }
  return released;
}

std::size_t PoolCore::release_at_least(std::size_t bytes) noexcept {
  const std::size_t backed = arena_.backed_bytes();
  return release_free_memory(backed > bytes ? backed - bytes : 0, /*may_cross=*/true);
}

std::size_t PoolCore::release_down_to(std::size_t keep) noexcept {
  // Chunks that fit above `keep` first; then, as cudaMemPoolTrimTo leaves at
  // most `keep`, chunks that straddle it (the pool may end below `keep`).
  // Without the second pass, 66 MiB of free chunks of 32, 32 and 2 MiB
  // trimmed to 40 MiB released nothing.
  std::size_t released = release_free_memory(keep);
  if (arena_.backed_bytes() > keep) released += release_free_memory(keep, /*may_cross=*/true);
  return released;
}

cudaError_t PoolCore::trim_to(std::size_t bytes_to_keep) noexcept {
  // Two passes at most: the second when a graph's release came during the
  // first's synchronize (its callback runs once the last launch completes).
  for (int pass = 0; pass < 2; ++pass) {
    // Released graphs' memory back first, outside the heap lock (collect frees into the pool).
    if (graphs_.memory().has_released()) graphs_.memory().collect();
    std::lock_guard<HeapMutex> lock(heap_.mutex());
    harvest_streams(nullptr);
    release_down_to(bytes_to_keep);
    if (arena_.backed_bytes() <= bytes_to_keep) return cudaSuccess;
    // Memory is still held by frees sova cannot prove complete (no fence covers
    // them). Like PyTorch's empty_cache, wait for the devices (the pool's, and
    // any other a free was made on), then release.
    if (frees_held_anywhere()) {
      synchronize_everything();
      release_down_to(bytes_to_keep);
    }
    if (!graphs_.memory().has_released()) break;
  }
  return cudaSuccess;
}

void PoolCore::track_stream_activity() noexcept {
  const std::int64_t now = now_ns();
  std::size_t active = 0;
  std::vector<StreamState*> idle;
  try {
    streams_.for_each_state([&](StreamState* s) {
      const std::uint64_t activity =
          s->allocations.load(std::memory_order_relaxed) + s->deallocations.load(std::memory_order_relaxed);
      if (activity != s->activity_seen || s->last_active_ns == 0) {
        s->activity_seen = activity;
        s->last_active_ns = now;
      }
      const bool is_active = !s->retired.load(std::memory_order_relaxed) && now - s->last_active_ns < kActivityWindowNs;
      s->active.store(is_active, std::memory_order_relaxed);
      active += is_active ? 1 : 0;
      // The legacy stream lives as long as the process: harvest_streams
      // fences it itself, unless a free on it was made on another device
      // (StreamState::foreign: no fence covers it).
      if (!is_active && (!s->is_legacy || s->foreign.load(std::memory_order_relaxed))) {
        std::lock_guard<SpinLock> lock(s->lock);
        if (s->open_epoch_has_frees) idle.push_back(s);
      }
    });
  } catch (...) {
    return;  // out of host memory: next period
  }
  // The count itself, 0 included: a floor of 1 here, with the next new
  // stream's increment on top, made one stream count as two.
  streams_.set_active(active);
  const std::uint64_t stranded = streams_.recount_stranded();
  // The interval is waived where the stranded memory exceeds the growth
  // budget's slack: the growth budget leaves it out, so until it comes back
  // the active streams may grow by as much again (threads_mixed with 16
  // streams of 64 sizes made anew every 0.2 s, simulation: 358-428 MiB
  // reserved with the interval kept, 230-318 without, 252-346 before the
  // budget left stranded memory out).
  const bool pressing = stranded > growth_slack(used_high_sampled_.load(std::memory_order_relaxed));
  if (idle.empty() || (!pressing && reclaimed_ns_ != 0 && now - reclaimed_ns_ < kReclaimIntervalNs)) return;
  reclaimed_ns_ = now;
  // Only what fences cover: the worker never synchronizes a device, which
  // would invalidate any capture running on it, one sova does not know of
  // included (a library's, another thread's; seen on the H200s). Frees no
  // fence covers (a stream that went quiet right after freeing, or was
  // destroyed) come back at the stream's next call, or by the out-of-memory
  // path's or a trim's synchronize. Their blocks, kept ones too (inactive), go
  // to the heap and their pending ranges are dropped.
  if (streams_.any_unfenced(idle) || !streams_.wait_fences(idle)) return;
  std::lock_guard<HeapMutex> heap(heap_.mutex());
  harvest_streams(nullptr);
  streams_.recount_stranded();
}

void PoolCore::release_if_idle() noexcept {
  std::uint64_t activity = 0;
  try {
    activity = streams_.activity();
  } catch (...) {
    return;
  }
  const bool idle = activity == activity_seen_;
  activity_seen_ = activity;
  if (!idle) return;
  std::unique_lock<HeapMutex> lock(heap_.mutex(), std::try_to_lock);
  if (!lock.owns_lock()) return;  // the pool is busy after all
  const std::uint64_t threshold = release_threshold_.load(std::memory_order_relaxed);
  if (arena_.backed_bytes() <= threshold) return;
  // Moves frees known complete to the safe set; asks streams with uncovered
  // frees for a fence (recorded at their next call; on the legacy stream, now).
  harvest_streams(nullptr);
  release_free_memory(threshold);
}

}  // namespace sova::detail
