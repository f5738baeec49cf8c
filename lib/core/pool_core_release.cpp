// Giving physical memory back: trim and the release threshold.
#include "core/pool_core.hpp"

namespace sova::detail {

std::size_t PoolCore::release_free_memory(std::size_t keep, bool may_cross) noexcept {
  // Largest free blocks first: they hold whole chunks most often.
  std::size_t released = 0;
  // A block with a pending free in it waits: work may still read its chunks.
  for (auto it = free_.rbegin(); it != free_.rend() && arena_.backed_bytes() > keep; ++it) {
    if (pending_elsewhere(nullptr, (*it)->offset, (*it)->size)) continue;
    released += arena_.release_within((*it)->offset, (*it)->size, keep, may_cross);
  }
  return released;
}

std::size_t PoolCore::release_at_least(std::size_t bytes) noexcept {
  const std::size_t backed = arena_.backed_bytes();
  return release_free_memory(backed > bytes ? backed - bytes : 0, /*may_cross=*/true);
}

cudaError_t PoolCore::trim_to(std::size_t bytes_to_keep) noexcept {
  std::lock_guard<HeapMutex> lock(heap_mutex_);
  harvest_streams(nullptr);
  release_free_memory(bytes_to_keep);
  if (arena_.backed_bytes() <= bytes_to_keep) return cudaSuccess;
  // Memory is still held by frees sova cannot prove complete (no fence covers
  // them). Like PyTorch's empty_cache, wait for the device, then release.
  if (frees_held_anywhere()) {
    synchronize_everything();
    release_free_memory(bytes_to_keep);
  }
  return cudaSuccess;
}

void PoolCore::release_if_idle() noexcept {
  std::uint64_t activity = 0;
  {
    std::lock_guard<std::mutex> lock(streams_mutex_);
    for (auto& entry : streams_) {
      activity += entry.second->allocations.load(std::memory_order_relaxed) +
                  entry.second->deallocations.load(std::memory_order_relaxed);
    }
  }
  const bool idle = activity == activity_seen_;
  activity_seen_ = activity;
  if (!idle) return;
  std::unique_lock<HeapMutex> lock(heap_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return;  // the pool is busy after all
  const std::uint64_t threshold = release_threshold_.load(std::memory_order_relaxed);
  if (arena_.backed_bytes() <= threshold) return;
  // Moves frees known complete to the safe set; asks streams with uncovered
  // frees for a fence (recorded at their next call; on the legacy stream, now).
  harvest_streams(nullptr);
  release_free_memory(threshold);
}

}  // namespace sova::detail
