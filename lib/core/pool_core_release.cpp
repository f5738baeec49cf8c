// Giving physical memory back: trim and the release threshold.
#include "core/pool_core.hpp"

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
    caches_.harvest(nullptr);
    release_down_to(bytes_to_keep);
    if (arena_.backed_bytes() <= bytes_to_keep) return cudaSuccess;
    // Memory is still held by frees sova cannot prove complete (no fence covers
    // them). Like PyTorch's empty_cache, wait for the devices (the pool's, and
    // any other a free was made on), then release.
    if (caches_.holds_frees()) {
      if (caches_.synchronize_all()) ++stats_.device_synchronizes;
      release_down_to(bytes_to_keep);
    }
    if (!graphs_.memory().has_released()) break;
  }
  return cudaSuccess;
}

void PoolCore::release_if_idle() noexcept {
  std::uint64_t activity = 0;
  try {
    activity = caches_.activity();
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
  caches_.harvest(nullptr);
  release_free_memory(threshold);
}

}  // namespace sova::detail
