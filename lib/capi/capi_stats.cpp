// sova C API — sovaMemPoolGetStats: sova::PoolStats as a C struct that can
// grow (include/sova/sova.h says the size rule). Its own file so that new
// PoolStats counters are added here and in sova.h only.
#include "capi/capi_errors.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/sova.h>

#include <cstddef>
#include <cstring>

using namespace sova::capi;

namespace {

sovaMemPoolStats to_c(const sova::PoolStats& s) noexcept {
  sovaMemPoolStats out;
  std::memset(&out, 0, sizeof out);
  out.structSize = sizeof out;
  out.reservedCurrent = s.reserved_current;
  out.reservedHigh = s.reserved_high;
  out.usedCurrent = s.used_current;
  out.usedHigh = s.used_high;
  out.liveBlocks = s.live_blocks;
  out.allocations = s.allocations;
  out.deallocations = s.deallocations;
  out.fastPathHits = s.fast_path_hits;
  out.failedAllocations = s.failed_allocations;
  out.cachedBytes = s.cached_bytes;
  out.cachedSmallBytes = s.cached_small_bytes;
  out.freeBackedBytes = s.free_backed_bytes;
  out.largestFreeBlock = s.largest_free_block;
  out.chunksMapped = s.chunks_mapped;
  out.chunksUnmapped = s.chunks_unmapped;
  out.chunksRemapped = s.chunks_remapped;
  out.bytesRemapped = s.bytes_remapped;
  out.crossStreamReuses = s.cross_stream_reuses;
  out.crossStreamWaits = s.cross_stream_waits;
  out.eventsRecorded = s.events_recorded;
  out.deviceSynchronizes = s.device_synchronizes;
  out.remapWaits = s.remap_waits;
  out.slowFromHeap = s.slow_from_heap;
  out.slowFromHeapAll = s.slow_from_heap_all;
  out.slowFromOtherStreams = s.slow_from_other_streams;
  out.slowWithWait = s.slow_with_wait;
  out.slowGrown = s.slow_grown;
  out.slowAfterSynchronize = s.slow_after_synchronize;
  out.slowFromHeapNs = s.slow_from_heap_ns;
  out.slowFromHeapAllNs = s.slow_from_heap_all_ns;
  out.slowFromOtherStreamsNs = s.slow_from_other_streams_ns;
  out.slowWithWaitNs = s.slow_with_wait_ns;
  out.slowGrownNs = s.slow_grown_ns;
  out.slowAfterSynchronizeNs = s.slow_after_synchronize_ns;
  out.remapsToGhosts = s.remaps_to_ghosts;
  out.ghostMappings = s.ghost_mappings;
  out.streamStates = s.stream_states;
  out.retiredStreams = s.retired_streams;
  out.activeStreams = s.active_streams;
  out.strandedBytes = s.stranded_bytes;
  return out;
}

}  // namespace

cudaError_t sovaMemPoolGetStats(sovaMemPool_t pool, sovaMemPoolStats* stats) {
  if (stats == nullptr) return cudaErrorInvalidValue;
  const std::size_t caller_size = stats->structSize;
  // The smallest struct worth filling holds structSize and reservedCurrent.
  if (caller_size < offsetof(sovaMemPoolStats, reservedHigh)) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  sovaMemPoolStats full;
  try {
    full = to_c(e->pool.stats());
  } catch (...) {
    return error_from_current_exception();
  }
  // Whole fields only, and never structSize itself: the caller's value stays.
  std::size_t n = caller_size < sizeof full ? caller_size : sizeof full;
  n -= (n - offsetof(sovaMemPoolStats, reservedCurrent)) % sizeof(std::uint64_t);
  std::memcpy(reinterpret_cast<char*>(stats) + offsetof(sovaMemPoolStats, reservedCurrent),
              reinterpret_cast<const char*>(&full) + offsetof(sovaMemPoolStats, reservedCurrent),
              n - offsetof(sovaMemPoolStats, reservedCurrent));
  return cudaSuccess;
}
