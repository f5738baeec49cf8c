// PoolCore::chunks_under: the physical chunks under a live block, for views
// of it (aliases) and for exporting it to another process (IPC).
#include "core/pool_core.hpp"

namespace sova::detail {

cudaError_t PoolCore::chunks_under(const void* ptr, std::size_t bytes, std::vector<Pool::ChunkView>* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return cudaErrorInvalidValue;
  std::lock_guard lock(heap_mutex_);
  // Only a live block's start: its chunks cannot move or go while it lives
  // (remapping and release take only chunks wholly inside free memory).
  const Block* block = map_.find(address - arena_.base());
  if (block == nullptr || block->state.load(std::memory_order_acquire) != BlockState::live) {
    return cudaErrorInvalidValue;
  }
  if (bytes == 0) bytes = block->requested;
  if (bytes == 0 || bytes > block->size) return cudaErrorInvalidValue;
  std::vector<Arena::ChunkInfo> chunks;
  try {
    if (!arena_.chunks_touching(block->offset, bytes, chunks)) return cudaErrorInvalidValue;
    out->clear();
    for (const Arena::ChunkInfo& c : chunks) {
      out->push_back(Pool::ChunkView{c.first_granule * arena_.granularity(), c.granules * arena_.granularity(),
                                     c.handle, c.serial});
    }
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

}  // namespace sova::detail
