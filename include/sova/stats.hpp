// sova — PoolStats, a snapshot of a pool's counters. The C API's
// sovaMemPoolStats (sova/sova.h) and the Python binding carry the same
// counters in the same order; a test checks the three against one list
// (lib/capi/stats_fields.hpp), so a counter is added to all of them at once.
#pragma once

#include <cstdint>

namespace sova {

/// A snapshot of a pool's statistics. The four cudaMemPoolAttr figures keep the
/// driver's meanings; the rest are sova's own counters.
struct PoolStats {
  std::uint64_t reserved_current = 0;  ///< cudaMemPoolAttrReservedMemCurrent
  std::uint64_t reserved_high = 0;     ///< cudaMemPoolAttrReservedMemHigh
  std::uint64_t used_current = 0;      ///< cudaMemPoolAttrUsedMemCurrent
  std::uint64_t used_high = 0;         ///< cudaMemPoolAttrUsedMemHigh (see docs/design.md)
  std::uint64_t live_blocks = 0;       ///< blocks handed out and not freed
  std::uint64_t allocations = 0;       ///< successful allocate calls
  std::uint64_t deallocations = 0;     ///< successful deallocate calls
  std::uint64_t fast_path_hits = 0;    ///< allocations served from the stream's own cache
  std::uint64_t failed_allocations = 0;
  std::uint64_t cached_bytes = 0;         ///< bytes in per-stream caches and the free heap, backed or not
  std::uint64_t cached_small_bytes = 0;   ///< part of cached_bytes in blocks <= kSmallBlockLimit
  std::uint64_t free_backed_bytes = 0;    ///< physical memory under free blocks (heap and caches), in whole granules (a granule shared with a live block counts whole), at most reserved_current
  std::uint64_t largest_free_block = 0;   ///< largest free block wholly backed: what an allocation gets without growing
  std::uint64_t chunks_mapped = 0;        ///< physical chunks created and mapped, ever
  std::uint64_t chunks_unmapped = 0;      ///< physical chunks unmapped and released, ever
  std::uint64_t chunks_remapped = 0;      ///< free physical chunks moved under new VA (PoolOptions::remap)
  std::uint64_t bytes_remapped = 0;       ///< their bytes: physical memory not created thanks to remapping
  std::uint64_t cross_stream_reuses = 0;  ///< blocks taken from another stream's frees
  std::uint64_t cross_stream_waits = 0;   ///< stream waits inserted (internal dependencies)
  std::uint64_t events_recorded = 0;
  std::uint64_t device_synchronizes = 0;  ///< last-resort syncs before reporting out of memory
  /// Host waits that remapping made (only beyond the growth budget,
  /// docs/design.md): on the allocating stream, so that its recent frees
  /// complete; and before unmapping the old place of a chunk moved from
  /// under such frees while work may still use it ("Pinned ghosts").
  std::uint64_t remap_waits = 0;

  /// Allocations the fast path did not serve (allocations - fast_path_hits),
  /// by the step of the slow path that served them (docs/design.md, "The
  /// slow path"), so that a user can see why a workload is slow:
  std::uint64_t slow_from_heap = 0;           ///< best fit in free memory after this stream's cache moved to the heap
  std::uint64_t slow_from_heap_all = 0;       ///< ... only after its kept small blocks moved too
  std::uint64_t slow_from_other_streams = 0;  ///< other streams' frees known complete
  std::uint64_t slow_with_wait = 0;           ///< another stream's frees, with a wait on its fence
  std::uint64_t slow_grown = 0;               ///< growth: physical memory created or remapped under the block
  std::uint64_t slow_after_synchronize = 0;   ///< after a device synchronize (the last step before out of memory)
  /// Host time spent in slow-path allocations, by the same steps, in
  /// nanoseconds: measured on one slow-path allocation in 8 per thread and
  /// scaled by 8 (a clock read costs ~36-50 ns on the H100's host),
  /// so an estimate; the lock wait is included.
  std::uint64_t slow_from_heap_ns = 0;
  std::uint64_t slow_from_heap_all_ns = 0;
  std::uint64_t slow_from_other_streams_ns = 0;
  std::uint64_t slow_with_wait_ns = 0;
  std::uint64_t slow_grown_ns = 0;
  std::uint64_t slow_after_synchronize_ns = 0;
  /// Part of chunks_remapped: moves back to a place the chunk had left and
  /// was still mapped at (a ghost mapping, docs/design.md): no driver call.
  std::uint64_t remaps_to_ghosts = 0;
  std::uint64_t ghost_mappings = 0;  ///< chunks' old mappings kept now (physical memory counted once)
  /// Stream states the pool holds: one per stream it has seen, and the states
  /// of destroyed streams whose handles were reused (retired). A stream the
  /// program destroys stays counted; its blocks come back to the other streams.
  std::uint64_t stream_states = 0;
  std::uint64_t retired_streams = 0;  ///< of them, retired: their stream is known gone
  /// Streams that allocated or freed in the last ~200 ms, as the pool's
  /// release worker last counted them (every 20 ms), plus streams made since:
  /// what decides whether its streams share it.
  std::uint64_t active_streams = 0;
  /// Bytes cached by the states of retired or inactive streams (never the
  /// legacy stream's): no fence of theirs will come, so other streams get
  /// them back where fences cover their frees (the release worker, ~0.2-1.2 s
  /// after the streams stopped, or a miss), else at a trim or the
  /// out-of-memory path's synchronize.
  /// The growth budget (PoolOptions::remap) leaves them out. A hint, as
  /// active_streams is.
  std::uint64_t stranded_bytes = 0;
  /// Sleep and wake (Pool::sleep): physical bytes sleep gave back that wake
  /// has not made again (0 awake), and the pinned host memory kept for
  /// backups (across cycles, until release_sleep_host_memory).
  std::uint64_t asleep_bytes = 0;
  std::uint64_t sleep_host_bytes = 0;
  /// CUDA graphs (docs/graphs.md): the bytes and blocks captured graphs hold
  /// now — pool memory, counted in reserved_current and used_current too —
  /// and the graphs whose memory is not yet back (graph_memory_stats()'s).
  std::uint64_t graph_held_bytes = 0;
  std::uint64_t graph_held_blocks = 0;
  std::uint64_t graphs = 0;
  /// Sleep's host memory budget and pin-ahead (PoolOptions::sleep_host_budget,
  /// sleep_pin_ahead; docs/sleep-wake.md, "Pinning ahead"): the budget (0: no
  /// limit); what pin-ahead works towards now (min(budget, the most a
  /// successful growth reserved: not reserved_high, which counts a growth
  /// undone midway and can be reset); 0 when off, or held after
  /// release_sleep_host_memory until the pool reserves more than it ever
  /// had, or after a failure until it grows); the part of sleep_host_bytes the
  /// background thread pinned; its pins that failed (the host out of pinned
  /// memory: not an error, the sleep pins the rest); and the sleeps and
  /// reserve_sleep_backup calls refused because they would exceed the budget.
  std::uint64_t sleep_host_budget = 0;
  std::uint64_t sleep_pin_ahead_target = 0;
  std::uint64_t sleep_pin_ahead_bytes = 0;
  std::uint64_t sleep_pin_ahead_failures = 0;
  std::uint64_t sleep_budget_refusals = 0;

  /// Peak reserved / peak used: the memory overhead of the pool since the
  /// high-water marks were last reset (1.0 = none; 0 when nothing was used).
  double peak_overhead() const noexcept {
    return used_high == 0 ? 0.0 : static_cast<double>(reserved_high) / static_cast<double>(used_high);
  }
};

}  // namespace sova
