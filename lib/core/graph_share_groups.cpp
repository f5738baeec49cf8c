// GraphMemory's share groups: graphs the program promises never run at once
// reuse the memory their captures freed (graph_memory.hpp, docs/graphs.md
// "Graphs that never run at once").
//
// Why this is safe under the promise: a block freed during member A's
// capture is used by A's launches only between its allocation and free
// nodes. Another member B reusing it uses it only during B's launches, and no
// launch of B runs while one of A may. Within one capture the usual rule
// holds (the same stream only: in capture order its later nodes follow the
// free), since one capture's streams do run at once.
#include "core/graph_memory.hpp"

#include <algorithm>

namespace sova::detail {

std::uint64_t GraphMemory::create_group() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    auto group = std::make_unique<Group>();
    group->id = next_group_;
    groups_.emplace(next_group_, std::move(group));
  } catch (...) {
    return 0;
  }
  return next_group_++;
}

cudaError_t GraphMemory::destroy_group(std::uint64_t id) noexcept {
  // As collect(): the blocks go back outside mu_, and a concurrent collect waits.
  std::lock_guard<std::mutex> collecting(collect_mu_);
  std::vector<void*> complete;
  std::vector<std::pair<void*, void*>> freed_on;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = groups_.find(id);
    if (it == groups_.end() || !it->second->open) return cudaErrorInvalidValue;
    it->second->open = false;
    std::erase_if(joining_, [id](const auto& join) { return join.second == id; });
    if (it->second->members == 0) release_group_locked(id, complete, freed_on);
  }
  if (!complete.empty()) source_.give_back(complete);
  for (const auto& [block, freer] : freed_on) source_.give_back_freed_on(block, freer);
  return cudaSuccess;
}

cudaError_t GraphMemory::capture_next_into(cudaStream_t stream, std::uint64_t id) noexcept {
  if (stream == nullptr || stream == cudaStreamLegacy) return cudaErrorInvalidValue;  // cannot capture
  const auto key = reinterpret_cast<std::uintptr_t>(stream);
  std::lock_guard<std::mutex> lock(mu_);
  if (id == 0) {
    joining_.erase(key);
    return cudaSuccess;
  }
  const auto it = groups_.find(id);
  if (it == groups_.end() || !it->second->open) return cudaErrorInvalidValue;
  try {
    joining_[key] = id;
  } catch (...) {
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

void GraphMemory::join_named_group_locked(Graph& graph, std::uintptr_t stream_key) noexcept {
  const auto join = joining_.find(stream_key);
  if (join == joining_.end()) return;
  if (const auto group = groups_.find(join->second); group != groups_.end() && group->second->open) {
    graph.group = group->second.get();
    ++graph.group->members;
  }
  joining_.erase(join);
}

void* GraphMemory::take_shared_locked(Graph& graph, std::uintptr_t stream_key, std::size_t bytes) noexcept {
  Group& group = *graph.group;
  for (auto fit = group.reusable.lower_bound(bytes); fit != group.reusable.end(); ++fit) {
    // Blocks are shared whole: one more than twice the request would hold
    // its rest idle while a request it suits better gets new memory (a small
    // output taking a member's large scratch). Larger ones come later in
    // size order: none fits.
    if (fit->first / 2 > bytes) break;
    const Group::Free& free = fit->second;
    // This capture's own frees on its other streams: nothing orders them before this node.
    if (free.freed_by == graph.capture_id && free.stream_key != stream_key) continue;
    const auto info = blocks_.find(free.block);
    if (info == blocks_.end()) continue;  // cannot be: the group's blocks stay listed until it goes
    BlockInfo& b = info->second;
    if (b.graph != &graph) {
      // The graph holds it too from now on: its release clears b.graph.
      try {
        graph.blocks.push_back(free.block);
      } catch (...) {
        return nullptr;  // new memory instead; the block stays the group's, free
      }
    }
    b.graph = &graph;
    b.live = true;
    void* const block = free.block;
    group.reusable.erase(fit);
    return block;
  }
  return nullptr;
}

bool GraphMemory::give_to_group_locked(Graph& graph, BlockInfo& b, void* ptr, unsigned long long capture_id,
                                       std::uintptr_t stream_key) noexcept {
  Group& group = *graph.group;
  const bool listed = b.group != nullptr;  // the group's already: freed in an earlier member's capture
  try {
    if (!listed) group.blocks.push_back(ptr);
  } catch (...) {
    return false;
  }
  try {
    group.reusable.emplace(b.bytes, Group::Free{ptr, capture_id, stream_key});
  } catch (...) {
    if (!listed) group.blocks.pop_back();
    return false;
  }
  b.group = &group;
  return true;
}

void GraphMemory::leave_group_locked(Graph& graph, std::vector<void*>& complete,
                                     std::vector<std::pair<void*, void*>>& freed_on) noexcept {
  Group* group = graph.group;
  if (group == nullptr) return;
  graph.group = nullptr;
  if (--group->members == 0 && !group->open) release_group_locked(group->id, complete, freed_on);
}

void GraphMemory::release_group_locked(std::uint64_t id, std::vector<void*>& complete,
                                       std::vector<std::pair<void*, void*>>& freed_on) noexcept {
  const auto it = groups_.find(id);
  if (it == groups_.end()) return;
  for (void* block : it->second->blocks) {
    const auto info = blocks_.find(block);
    if (info == blocks_.end()) continue;
    BlockInfo& b = info->second;
    b.group = nullptr;
    // A graph outside the group that captured the caller's free still holds
    // it: that graph's release gives it back (release_locked).
    if (b.graph != nullptr || b.freed_in != nullptr) continue;
    retire_locked(info, complete, freed_on);
  }
  groups_.erase(it);
}

}  // namespace sova::detail
