// The one list of a pool's statistics counters: each counter's C name
// (sovaMemPoolStats in sova/sova.h, and the Python binding's PoolStats in
// python/sova/_capi.py) and C++ name (sova::PoolStats in sova/stats.hpp), in
// the C struct's order. Copies between the two structs are made from it (the
// C API's, capi_stats.cpp; the benchmarks', reading a C API pool's counters
// as sova::PoolStats). The structs keep their own declarations (each with its
// documentation); they are checked against this list:
//   - here, at compile time, in every file that includes this header (the
//     library's capi_stats.cpp among them): each struct holds exactly
//     these counters, all uint64, in this order, and nothing else;
//   - by the test capi_stats_fields_python (test/capi): _capi.py's field list
//     and the ctypes struct made from it against the C struct's layout.
// So a counter added to one struct and not to the others fails the build or
// that test. A new counter goes at the end of every list (the C struct only
// ever grows at its end: sova.h says why).
#pragma once

#include <sova/sova.h>
#include <sova/stats.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

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
  X(strandedBytes, stranded_bytes) \
  X(asleepBytes, asleep_bytes) \
  X(sleepHostBytes, sleep_host_bytes) \
  X(graphHeldBytes, graph_held_bytes) \
  X(graphHeldBlocks, graph_held_blocks) \
  X(graphs, graphs) \
  X(sleepHostBudget, sleep_host_budget) \
  X(sleepPinAheadTarget, sleep_pin_ahead_target) \
  X(sleepPinAheadBytes, sleep_pin_ahead_bytes) \
  X(sleepPinAheadFailures, sleep_pin_ahead_failures) \
  X(sleepBudgetRefusals, sleep_budget_refusals)

namespace sova::capi::stats_fields {

/// Each counter's index in the list, by its C name.
enum Index : std::size_t {
#define SOVA_STATS_FIELD_INDEX(c_field, cpp_field) c_field,
  SOVA_POOL_STATS_FIELDS(SOVA_STATS_FIELD_INDEX)
#undef SOVA_STATS_FIELD_INDEX
};

/// How many counters the list has.
#define SOVA_STATS_FIELD_ONE(c_field, cpp_field) +1
inline constexpr std::size_t kCount = 0 SOVA_POOL_STATS_FIELDS(SOVA_STATS_FIELD_ONE);
#undef SOVA_STATS_FIELD_ONE

/// Where the counters start in the C struct: after structSize.
inline constexpr std::size_t kFirstCOffset = offsetof(sovaMemPoolStats, reservedCurrent);

#define SOVA_STATS_FIELD_CHECK(c_field, cpp_field) \
  static_assert(std::is_same_v<decltype(sovaMemPoolStats::c_field), std::uint64_t>, \
                "sovaMemPoolStats." #c_field " is not a uint64_t"); \
  static_assert(std::is_same_v<decltype(sova::PoolStats::cpp_field), std::uint64_t>, \
                "sova::PoolStats::" #cpp_field " is not a std::uint64_t"); \
  static_assert(offsetof(sovaMemPoolStats, c_field) == kFirstCOffset + c_field * sizeof(std::uint64_t), \
                "sovaMemPoolStats." #c_field " is not where lib/capi/stats_fields.hpp lists it"); \
  static_assert(offsetof(sova::PoolStats, cpp_field) == c_field * sizeof(std::uint64_t), \
                "sova::PoolStats::" #cpp_field " is not where lib/capi/stats_fields.hpp lists it");
SOVA_POOL_STATS_FIELDS(SOVA_STATS_FIELD_CHECK)
#undef SOVA_STATS_FIELD_CHECK

// With every listed counter in its place, a size beyond the list's is a
// counter the list lacks.
static_assert(sizeof(sovaMemPoolStats) == kFirstCOffset + kCount * sizeof(std::uint64_t),
              "sovaMemPoolStats has a field that lib/capi/stats_fields.hpp does not list");
static_assert(sizeof(sova::PoolStats) == kCount * sizeof(std::uint64_t),
              "sova::PoolStats has a field that lib/capi/stats_fields.hpp does not list");

}  // namespace sova::capi::stats_fields
