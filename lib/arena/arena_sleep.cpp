// Arena: giving every chunk's physical memory back and making it anew under
// the same addresses (a pool's sleep and wake; core/pool_sleep.hpp).
//
// Order, so that a failure leaves either all of a step or none of it:
//   unback_all: chunk by chunk (ghosts, unmap, release); a chunk that cannot
//     go stays whole, and the caller learns which went.
//   reback: every chunk created, then every one mapped, then access set; a
//     failure undoes the step's earlier work in reverse, so wake either makes
//     all the memory or none.
#include "arena/arena.hpp"

#include <algorithm>
#include <new>

namespace sova::detail {

cudaError_t Arena::unback_all(std::vector<Extent>& released) {
  released.reserve(released.size() + live_chunks());
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    const auto slot = static_cast<std::int32_t>(i);
    Chunk& chunk = chunks_[i];
    if (chunk.granules == 0) continue;
    if (!ghosts_.drop_of(slot)) return cudaErrorNotReady;
    const std::size_t bytes = chunk.granules * granularity_;
    if (const cudaError_t error = driver_.unmap(base_ + chunk.first_granule * granularity_, bytes);
        error != cudaSuccess) {
      return error;
    }
    // Unmapped, the memory goes with the handle; a failed release has
    // nothing left to undo.
    (void)driver_.physical_release(chunk.handle);
    released.push_back(Extent{chunk.first_granule, chunk.granules});  // reserved above: no throw
    mark(chunk.first_granule, chunk.granules, kUnbacked);
    backed_bytes_ -= bytes;
    ++chunks_unmapped_;
    chunk = Chunk{};
    free_chunk_slots_.push_back(slot);  // capacity never shrinks below chunks_.size(): no throw
  }
  return cudaSuccess;
}

cudaError_t Arena::reback(const std::vector<Extent>& extents, std::vector<PhysicalHandle>& handles) {
  handles.clear();
  handles.reserve(extents.size());
  const std::vector<cudaMemAccessDesc> descs = access_descs();
  cudaError_t error = cudaSuccess;
  // Every chunk created first: the step that fails when the device is full.
  for (const Extent& e : extents) {
    PhysicalHandle handle = 0;
    error = driver_.physical_create_with(props_, e.granules * granularity_, &handle);
    if (error != cudaSuccess) break;
    handles.push_back(handle);
  }
  std::size_t mapped = 0;
  if (error == cudaSuccess) {
    for (; mapped < extents.size(); ++mapped) {
      const Extent& e = extents[mapped];
      error = driver_.map(base_ + e.first_granule * granularity_, e.granules * granularity_, handles[mapped]);
      if (error != cudaSuccess) break;
    }
  }
  if (error == cudaSuccess) {
    for (const Extent& e : extents) {
      error = driver_.set_access(base_ + e.first_granule * granularity_, e.granules * granularity_, descs.data(),
                                 descs.size());
      if (error != cudaSuccess) break;
    }
  }
  if (error == cudaSuccess) return cudaSuccess;
  for (std::size_t i = 0; i < mapped; ++i) {
    (void)driver_.unmap(base_ + extents[i].first_granule * granularity_, extents[i].granules * granularity_);
  }
  for (PhysicalHandle handle : handles) (void)driver_.physical_release(handle);
  handles.clear();
  return error;
}

void Arena::unreback(const std::vector<Extent>& extents, const std::vector<PhysicalHandle>& handles) noexcept {
  for (std::size_t i = 0; i < extents.size() && i < handles.size(); ++i) {
    (void)driver_.unmap(base_ + extents[i].first_granule * granularity_, extents[i].granules * granularity_);
    (void)driver_.physical_release(handles[i]);
  }
}

void Arena::rebacked(const std::vector<Extent>& extents, const std::vector<PhysicalHandle>& handles) {
  const std::size_t reused = std::min(free_chunk_slots_.size(), extents.size());
  const std::size_t added = extents.size() - reused;
  chunks_.reserve(chunks_.size() + added);
  free_chunk_slots_.reserve(chunks_.size() + added);  // destroy_chunk's push_back never throws
  for (std::size_t i = 0; i < extents.size(); ++i) {
    std::int32_t slot;
    if (!free_chunk_slots_.empty()) {
      slot = free_chunk_slots_.back();
      free_chunk_slots_.pop_back();
    } else {
      chunks_.emplace_back();  // reserved above: no throw
      slot = static_cast<std::int32_t>(chunks_.size() - 1);
    }
    Chunk& chunk = chunks_[static_cast<std::size_t>(slot)];
    chunk = Chunk{extents[i].first_granule, extents[i].granules, handles[i], next_serial_++};
    chunk.accessible = true;
    mark(chunk.first_granule, chunk.granules, slot);
    backed_bytes_ += chunk.granules * granularity_;
    ++chunks_mapped_;
  }
  backed_high_ = std::max(backed_high_, backed_bytes_);
  backed_peak_ = std::max(backed_peak_, backed_bytes_);
}

}  // namespace sova::detail
