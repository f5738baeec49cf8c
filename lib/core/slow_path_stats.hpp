// SlowPathStats: the pool's counters of what the slow path did (which step
// served an allocation and what it cost, cross-stream reuse, waits,
// synchronizes, failures) and how they read as PoolStats fields (fences
// recorded are the StreamRegistry's count).
//
// Written under the pool's heap lock (the slow path holds it throughout). No
// lock of its own.
#pragma once

#include <sova/stats.hpp>

#include <cstdint>

namespace sova::detail {

/// The step of the slow path that served an allocation (PoolStats::slow_*).
enum class SlowStep : std::uint8_t { heap, heap_all, other_streams, wait, grown, after_synchronize, count };

/// One slow-path allocation in this many (per thread) is timed (docs/design.md, "Tuning constants").
inline constexpr std::uint32_t kSlowTimingEvery = 8;

struct SlowPathStats {
  std::uint64_t failed_allocations = 0;
  std::uint64_t cross_stream_reuses = 0;
  std::uint64_t cross_stream_waits = 0;
  std::uint64_t device_synchronizes = 0;
  std::uint64_t remap_waits = 0;  ///< waits for a stream's own frees, and pinned ghosts settled by a wait
  /// Slow-path allocations by the step that served them, and the sampled
  /// host time they took (scaled by kSlowTimingEvery).
  std::uint64_t slow_count[static_cast<int>(SlowStep::count)] = {};
  std::uint64_t slow_ns[static_cast<int>(SlowStep::count)] = {};

  /// An allocation served by `step`; `sampled_ns`: its host time when this
  /// one was timed (one in kSlowTimingEvery), else 0.
  void served(SlowStep step, std::uint64_t sampled_ns) noexcept {
    ++slow_count[static_cast<int>(step)];
    if (sampled_ns != 0) slow_ns[static_cast<int>(step)] += kSlowTimingEvery * sampled_ns;
  }

  /// Copies the counters into their PoolStats fields.
  void fill(PoolStats& s) const noexcept {
    s.failed_allocations = failed_allocations;
    s.cross_stream_reuses = cross_stream_reuses;
    s.cross_stream_waits = cross_stream_waits;
    s.device_synchronizes = device_synchronizes;
    s.remap_waits = remap_waits;
    auto count = [this](SlowStep step) { return slow_count[static_cast<int>(step)]; };
    auto ns = [this](SlowStep step) { return slow_ns[static_cast<int>(step)]; };
    s.slow_from_heap = count(SlowStep::heap);
    s.slow_from_heap_all = count(SlowStep::heap_all);
    s.slow_from_other_streams = count(SlowStep::other_streams);
    s.slow_with_wait = count(SlowStep::wait);
    s.slow_grown = count(SlowStep::grown);
    s.slow_after_synchronize = count(SlowStep::after_synchronize);
    s.slow_from_heap_ns = ns(SlowStep::heap);
    s.slow_from_heap_all_ns = ns(SlowStep::heap_all);
    s.slow_from_other_streams_ns = ns(SlowStep::other_streams);
    s.slow_with_wait_ns = ns(SlowStep::wait);
    s.slow_grown_ns = ns(SlowStep::grown);
    s.slow_after_synchronize_ns = ns(SlowStep::after_synchronize);
  }
};

}  // namespace sova::detail
