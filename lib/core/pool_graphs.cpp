// Pool's graph-memory methods (sova/pool.hpp; the machinery in graph_memory.hpp).
#include "core/pool_core.hpp"

#include <sova/pool.hpp>

namespace sova {

GraphMemoryStats Pool::graph_memory_stats() const { return core_->graph_memory().stats(); }

GraphMemorySnapshot Pool::graph_memory_snapshot() const { return core_->graph_memory().snapshot(); }

void Pool::reset_graph_memory_high() noexcept { core_->graph_memory().reset_high(); }

void Pool::trim_graph_memory() {
  core_->graph_memory().collect();
  std::uint64_t threshold = 0;
  if (core_->get_attribute(cudaMemPoolAttrReleaseThreshold, &threshold) != cudaSuccess) threshold = 0;
  trim_to(threshold);
}

cudaError_t Pool::create_graph_share_group(std::uint64_t* group) noexcept {
  if (group == nullptr) return cudaErrorInvalidValue;
  const std::uint64_t id = core_->graph_memory().create_group();
  if (id == 0) return cudaErrorMemoryAllocation;
  *group = id;
  return cudaSuccess;
}

cudaError_t Pool::destroy_graph_share_group(std::uint64_t group) noexcept {
  return core_->graph_memory().destroy_group(group);
}

cudaError_t Pool::capture_into_share_group(cudaStream_t stream, std::uint64_t group) noexcept {
  return core_->graph_memory().capture_next_into(stream, group);
}

}  // namespace sova
