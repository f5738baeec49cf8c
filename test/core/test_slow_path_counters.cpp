// SlowPathStats (lib/core/slow_path_stats.hpp): each counter lands in its own
// PoolStats field, and sampled times are scaled by kSlowTimingEvery.
#include "support/catch.hpp"

#include "core/slow_path_stats.hpp"

using sova::detail::SlowPathStats;
using sova::detail::SlowStep;

TEST_CASE("slow-path counters fill their PoolStats fields", "[slow_path_stats]") {
  SlowPathStats counters;
  counters.failed_allocations = 1;
  counters.cross_stream_reuses = 2;
  counters.cross_stream_waits = 3;
  counters.device_synchronizes = 4;
  counters.remap_waits = 5;
  counters.served(SlowStep::heap, 0);
  counters.served(SlowStep::heap, 10);
  counters.served(SlowStep::heap_all, 0);
  for (int i = 0; i < 3; ++i) counters.served(SlowStep::other_streams, 0);
  for (int i = 0; i < 4; ++i) counters.served(SlowStep::wait, 0);
  for (int i = 0; i < 5; ++i) counters.served(SlowStep::grown, 7);
  for (int i = 0; i < 6; ++i) counters.served(SlowStep::after_synchronize, 0);
  sova::PoolStats s;
  counters.fill(s);
  CHECK(s.failed_allocations == 1);
  CHECK(s.cross_stream_reuses == 2);
  CHECK(s.cross_stream_waits == 3);
  CHECK(s.device_synchronizes == 4);
  CHECK(s.remap_waits == 5);
  CHECK(s.slow_from_heap == 2);
  CHECK(s.slow_from_heap_all == 1);
  CHECK(s.slow_from_other_streams == 3);
  CHECK(s.slow_with_wait == 4);
  CHECK(s.slow_grown == 5);
  CHECK(s.slow_after_synchronize == 6);
  CHECK(s.slow_from_heap_ns == 10 * sova::detail::kSlowTimingEvery);
  CHECK(s.slow_grown_ns == 5 * 7 * sova::detail::kSlowTimingEvery);
  CHECK(s.slow_from_heap_all_ns == 0);
  CHECK(s.slow_after_synchronize_ns == 0);
}
