// Statistics, attributes, access, and the invariant checker.
#include "core/pool_core.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

namespace sova::detail {

PoolStats PoolCore::stats() {
  // Released graphs' memory back first: a read after the release sees it.
  if (graphs_.memory().has_released()) graphs_.memory().collect();
  const GraphMemoryStats graph = graphs_.memory().stats();  // its own lock, before the heap's
  PoolStats s;
  s.graph_held_bytes = graph.held_bytes;
  s.graph_held_blocks = graph.held_blocks;
  s.graphs = graph.graphs;
  std::lock_guard<HeapMutex> heap(heap_.mutex());
  caches_.sample_used_high();
  s.reserved_current = arena_.backed_bytes();
  s.reserved_high = arena_.backed_high();
  s.chunks_mapped = arena_.chunks_mapped();
  s.chunks_unmapped = arena_.chunks_unmapped();
  stats_.fill(s);
  s.events_recorded = caches_.events_recorded();
  // Free memory: per-stream caches and heap blocks. The
  // never-used tail of the VA is not "cached"; its backed bytes (if any) are.
  auto count_free = [&](const Block* b, bool whole_block_cached) {
    if (whole_block_cached) {
      s.cached_bytes += b->size;
      if (b->size <= kSmallBlockLimit) s.cached_small_bytes += b->size;
    }
    const std::size_t backed = arena_.backed_bytes_in(b->offset, b->size);
    s.free_backed_bytes += backed;
    if (backed != 0 && arena_.is_backed(b->offset, b->size)) {
      s.largest_free_block = std::max<std::uint64_t>(s.largest_free_block, b->size);
    }
  };
  const StreamTotals streams = caches_.tally([&](const Block* b) { count_free(b, true); });
  s.allocations = streams.allocations;
  s.deallocations = streams.deallocations;
  s.fast_path_hits = streams.fast_hits;
  // The never-used tail of each region (the VA's end, the region boundary) is not "cached".
  for (const Block* b : heap_.free_blocks()) {
    const std::size_t end = b->offset + b->size;
    count_free(b, end != arena_.size() && (placement_.region_boundary() == 0 || end != placement_.region_boundary()));
  }
  // Granules shared by a free block and a live neighbour are counted with
  // both: bound the free figure by what is reserved.
  s.free_backed_bytes = std::min<std::uint64_t>(s.free_backed_bytes, s.reserved_current);
  s.chunks_remapped = arena_.chunks_moved();
  s.bytes_remapped = arena_.bytes_moved();
  s.remaps_to_ghosts = arena_.ghost_moves();
  s.ghost_mappings = arena_.live_ghosts();
  s.stream_states = caches_.count();
  s.retired_streams = caches_.retired_count();
  s.active_streams = caches_.active();
  s.stranded_bytes = caches_.stranded();
  s.asleep_bytes = sleep_.asleep_bytes();
  s.sleep_host_bytes = sleep_.host_bytes();
  s.sleep_host_budget = sleep_.host_budget();
  s.sleep_pin_ahead_target = pin_ahead_.target();
  // Read after sleep_host_bytes, without the sleep's lock: a slab adopted or
  // released between the two reads must not show more pinned ahead than
  // held (the documented part-of relation holds in every snapshot).
  s.sleep_pin_ahead_bytes = std::min<std::uint64_t>(sleep_.pinned_ahead_bytes(), s.sleep_host_bytes);
  s.sleep_pin_ahead_failures = pin_ahead_.failures();
  s.sleep_budget_refusals = sleep_.budget_refusals();
  s.used_current = streams.used > 0 ? static_cast<std::uint64_t>(streams.used) : 0;
  // Exact while one thread makes every call, however many streams
  // (UsedHigh); after a second thread called, the larger of the mark reached
  // before and the sampled sum (a lower bound; docs/design.md, "Statistics").
  // A stream's own mark is the pool's only while it is the only stream: with
  // several, a stream that frees others' blocks sees its count fall below
  // zero and its mark mean nothing.
  const bool one_stream = caches_.count() == 1;
  s.used_high = std::max<std::uint64_t>(caches_.used_high(),
                                        one_stream ? static_cast<std::uint64_t>(streams.stream_high) : 0);
  s.used_high = std::max({s.used_high, caches_.used_high_counted(), s.used_current});
  s.live_blocks = streams.live_blocks > 0 ? static_cast<std::uint64_t>(streams.live_blocks) : 0;
  return s;
}

std::string PoolCore::describe() {
  const PoolStats s = stats();
  // The limit as the user set it: a pool with none says so (max_size 0
  // means no limit, not a limit of 0 B), with the device's memory that then
  // bounds it.
  char limit[96];
  if (arena_.max_physical() != 0) {
    std::snprintf(limit, sizeof limit, "max size %zu B", arena_.max_physical());
  } else {
    std::snprintf(limit, sizeof limit, "no max size (device memory %zu B)", info_.total_memory);
  }
  char line[560];
  std::snprintf(line, sizeof line,
                "pool on device %d (%s driver): reserved %" PRIu64 " B (high %" PRIu64 "), used %" PRIu64
                " B (high %" PRIu64 ") in %" PRIu64 " blocks, cached %" PRIu64 " B, largest free backed block %" PRIu64
                " B, %s, policy %s",
                device_, driver_.name(), s.reserved_current, s.reserved_high, s.used_current, s.used_high,
                s.live_blocks, s.cached_bytes, s.largest_free_block, limit, placement_.name());
  return line;
}

cudaError_t PoolCore::set_attribute(cudaMemPoolAttr attr, const void* value) noexcept {
  if (value == nullptr) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
      reuse_follow_event_dependencies_.store(*static_cast<const int*>(value) != 0);
      return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic:
      reuse_allow_opportunistic_.store(*static_cast<const int*>(value) != 0);
      return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      reuse_allow_internal_dependencies_.store(*static_cast<const int*>(value) != 0);
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      release_threshold_.store(*static_cast<const std::uint64_t*>(value));
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      if (*static_cast<const std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
      {
        std::lock_guard<HeapMutex> lock(heap_.mutex());
        arena_.reset_backed_high();
      }
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      if (*static_cast<const std::uint64_t*>(value) != 0) return cudaErrorInvalidValue;
      try {
        std::lock_guard<HeapMutex> heap(heap_.mutex());
        caches_.reset_used_high();
      } catch (...) {
        return cudaErrorMemoryAllocation;
      }
      return cudaSuccess;
    default: return cudaErrorInvalidValue;  // the Current figures are read-only; unknown attributes
  }
}

cudaError_t PoolCore::get_attribute(cudaMemPoolAttr attr, void* value) noexcept {
  if (value == nullptr) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
      *static_cast<int*>(value) = reuse_follow_event_dependencies_.load() ? 1 : 0;
      return cudaSuccess;
    case cudaMemPoolReuseAllowOpportunistic:
      *static_cast<int*>(value) = reuse_allow_opportunistic_.load() ? 1 : 0;
      return cudaSuccess;
    case cudaMemPoolReuseAllowInternalDependencies:
      *static_cast<int*>(value) = reuse_allow_internal_dependencies_.load() ? 1 : 0;
      return cudaSuccess;
    case cudaMemPoolAttrReleaseThreshold:
      *static_cast<std::uint64_t*>(value) = release_threshold_.load();
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemCurrent:
    case cudaMemPoolAttrUsedMemHigh: {
      PoolStats s;
      try {
        s = stats();
      } catch (...) {
        return cudaErrorMemoryAllocation;
      }
      std::uint64_t figure = attr == cudaMemPoolAttrReservedMemCurrent ? s.reserved_current
                             : attr == cudaMemPoolAttrReservedMemHigh  ? s.reserved_high
                             : attr == cudaMemPoolAttrUsedMemCurrent   ? s.used_current
                                                                       : s.used_high;
      *static_cast<std::uint64_t*>(value) = figure;
      return cudaSuccess;
    }
    default: return cudaErrorInvalidValue;
  }
}

cudaError_t PoolCore::set_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept {
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  return arena_.set_peer_access(descs, count);
}

cudaError_t PoolCore::get_access(cudaMemAccessFlags* flags, const cudaMemLocation* location) noexcept {
  if (flags == nullptr || location == nullptr) return cudaErrorInvalidValue;
  if (location->type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
  int count = 0;
  if (driver_.device_count(&count) != cudaSuccess || location->id < 0 || location->id >= count) {
    return cudaErrorInvalidValue;
  }
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  *flags = arena_.access_of(location->id);
  return cudaSuccess;
}

void PoolCore::check_invariants() {
  std::lock_guard<HeapMutex> heap(heap_.mutex());
  std::string problem;
  auto fail = [&](const std::string& what, const Block* b) {
    if (problem.empty()) {
      problem = what + (b != nullptr ? " (block at offset " + std::to_string(b->offset) + ", size " +
                                           std::to_string(b->size) + ")"
                                     : std::string());
    }
  };
  // Every stream's cache held still while the heap's blocks are compared with it.
  caches_.audit(
      [&](const StreamCaches::Census& caches) {
        std::size_t expected_offset = 0;
        std::size_t free_blocks = 0, cached_blocks = 0;
        std::int64_t live_requested = 0;
        const Block* prev = nullptr;
        for (const Block* b = heap_.find(0); b != nullptr && problem.empty(); prev = b, b = b->next) {
          if (b->offset != expected_offset) fail("blocks do not tile the VA range", b);
          if (b->prev != prev) fail("broken address-order link", b);
          if (b->size == 0 || b->size % kAlignment != 0) fail("block size not a positive multiple of 512", b);
          if (heap_.find(b->offset) != b) fail("block map does not point at block", b);
          const BlockState state = b->state.load();
          if (state != BlockState::free) {
            // Policies may back less than the whole block: what the block records as
            // backed must be, and must cover at least the request it was made for.
            // Asleep, the chunks are gone: the records stand for what wake makes again.
            if (b->backed == 0 || b->backed > b->size || (!sleep_.asleep() && !arena_.is_backed(b->offset, b->backed))) {
              fail("live or cached block not backed as it records", b);
            }
            if (state == BlockState::live && b->backed < b->requested) fail("live block backed short of its request", b);
          }
          if (state == BlockState::live) live_requested += static_cast<std::int64_t>(b->requested);
          if (state == BlockState::cached) ++cached_blocks;
          if (state == BlockState::free) {
            ++free_blocks;
            if (!heap_.free_blocks().contains(b)) fail("free block missing from the heap's set", b);
            if (b->stream != nullptr) fail("free block tagged with a stream", b);
            if (heap_.merges_with(prev, b)) fail("adjacent free blocks not coalesced", b);
          }
          expected_offset = b->offset + b->size;
        }
        if (problem.empty() && expected_offset != arena_.size()) fail("blocks do not cover the VA range", nullptr);
        if (!heap_.pending_listed()) fail("a stream with pending frees missing from the heap's pending streams", nullptr);
        if (problem.empty() && heap_.free_blocks().size() != free_blocks) {
          fail("free sets and free blocks disagree", nullptr);
        }
        if (problem.empty() && caches.cached_blocks != cached_blocks) fail("caches and cached blocks disagree", nullptr);
        if (problem.empty() && caches.live_bytes != live_requested) {
          fail("used bytes " + std::to_string(caches.live_bytes) + " != live blocks' bytes " +
                   std::to_string(live_requested),
               nullptr);
        }
      },
      fail);
  if (problem.empty() && arena_.backed_bytes() > arena_.size()) fail("more backed than reserved", nullptr);
  if (!problem.empty()) throw Error("sova: invariant broken: " + problem, cudaErrorUnknown);
}

}  // namespace sova::detail
