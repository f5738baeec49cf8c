// Giving physical memory back: trim and the release threshold.
#include "core/pool_core.hpp"

namespace sova::detail {

std::size_t PoolCore::release_free_memory(std::size_t keep) noexcept {
  // Largest free blocks first: they hold whole chunks most often.
  std::size_t released = 0;
  for (auto it = safe_.rbegin(); it != safe_.rend() && arena_.backed_bytes() > keep; ++it) {
    released += arena_.release_within((*it)->offset, (*it)->size, keep);
  }
  return released;
}

cudaError_t PoolCore::trim_to(std::size_t bytes_to_keep) noexcept {
  std::lock_guard<std::mutex> lock(heap_mutex_);
  harvest_streams(nullptr);
  release_free_memory(bytes_to_keep);
  if (arena_.backed_bytes() <= bytes_to_keep) return cudaSuccess;
  // Memory is still held by frees sova cannot prove complete (no fence covers
  // them). Like PyTorch's empty_cache, wait for the device, then release.
  bool anything_held = false;
  for (StreamState* s : all_streams()) {
    s->lock.lock();
    anything_held = anything_held || s->cache.blocks() != 0;
    s->lock.unlock();
    anything_held = anything_held || !s->pending.empty();
  }
  if (anything_held) {
    synchronize_everything();
    release_free_memory(bytes_to_keep);
  }
  return cudaSuccess;
}

}  // namespace sova::detail
