// sova C API — which sovaMemPoolStats field holds which sova::PoolStats
// counter, in the C struct's order: one list for the C API's copy
// (capi_stats.cpp) and for programs that read a C API pool's counters as
// sova::PoolStats (the benchmarks). A counter added to both structs is added
// here once.
#pragma once

/// Calls X(c_field, cpp_field) for every counter, in sovaMemPoolStats' order.
#define SOVA_POOL_STATS_FIELDS(X) \
  X(reservedCurrent, reserved_current) \
  X(reservedHigh, reserved_high) \
  X(usedCurrent, used_current) \
  X(usedHigh, used_high) \
  X(liveBlocks, live_blocks) \
  X(allocations, allocations) \
  X(deallocations, deallocations) \
  X(fastPathHits, fast_path_hits) \
  X(failedAllocations, failed_allocations) \
  X(cachedBytes, cached_bytes) \
  X(cachedSmallBytes, cached_small_bytes) \
  X(freeBackedBytes, free_backed_bytes) \
  X(largestFreeBlock, largest_free_block) \
  X(chunksMapped, chunks_mapped) \
  X(chunksUnmapped, chunks_unmapped) \
  X(chunksRemapped, chunks_remapped) \
  X(bytesRemapped, bytes_remapped) \
  X(crossStreamReuses, cross_stream_reuses) \
  X(crossStreamWaits, cross_stream_waits) \
  X(eventsRecorded, events_recorded) \
  X(deviceSynchronizes, device_synchronizes) \
  X(remapWaits, remap_waits) \
  X(slowFromHeap, slow_from_heap) \
  X(slowFromHeapAll, slow_from_heap_all) \
  X(slowFromOtherStreams, slow_from_other_streams) \
  X(slowWithWait, slow_with_wait) \
  X(slowGrown, slow_grown) \
  X(slowAfterSynchronize, slow_after_synchronize) \
  X(slowFromHeapNs, slow_from_heap_ns) \
  X(slowFromHeapAllNs, slow_from_heap_all_ns) \
  X(slowFromOtherStreamsNs, slow_from_other_streams_ns) \
  X(slowWithWaitNs, slow_with_wait_ns) \
  X(slowGrownNs, slow_grown_ns) \
  X(slowAfterSynchronizeNs, slow_after_synchronize_ns) \
  X(remapsToGhosts, remaps_to_ghosts) \
  X(ghostMappings, ghost_mappings) \
  X(streamStates, stream_states) \
  X(retiredStreams, retired_streams) \
  X(activeStreams, active_streams) \
  X(strandedBytes, stranded_bytes)
