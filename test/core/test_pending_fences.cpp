// A stream that stages many pending ranges asks for a fence (Heap::add_pending,
// kFenceEveryStaged): once that fence completes, the ranges before it are
// dropped unmerged instead of being merged into the ordered map when the
// staged ones reach PendingRanges::kStagedBeforeMerge (5-13% of a replay's
// host time; docs/benchmarks.md, "Pending frees and their fences"). Observed through the
// events the pool records: the stream's next call records the fence.
#include "core/pool_core.hpp"
#include "core/sim_pool_fixture.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

// Frees `count` blocks on a stream whose work is held (so every free stays
// pending), flushes them with one miss, then frees that miss's block and
// takes it again from the cache (a small free and a fast-path hit: neither
// reads the clock). Returns the events the free and the hit recorded.
std::uint64_t events_after_flushing(std::size_t count) {
  constexpr std::size_t kBlock = 1280 << 10;  // above kSmallBlockLimit: flushed by a miss, not kept
  SimDriver sim(small_sim(std::size_t{4} << 30));
  PoolOptions options = options_on(sim);
  options.release_threshold = std::numeric_limits<std::uint64_t>::max();
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();
  sim.delay(s, std::chrono::milliseconds(1500));  // nothing on s completes during the test
  std::vector<void*> blocks(count);
  for (void*& b : blocks) b = pool.allocate(kBlock, s);
  for (void* b : blocks) pool.deallocate(b, s);
  void* other = pool.allocate(kBlock + 4096, s);  // a miss: flushes every cached block, each pending
  const std::uint64_t before = pool.stats().events_recorded;
  pool.deallocate(other, s);
  void* again = pool.allocate(kBlock + 4096, s);  // from the cache
  CHECK(again == other);
  const std::uint64_t recorded = pool.stats().events_recorded - before;
  pool.deallocate(again, s);
  sim.stream_synchronize(s);
  pool.check_invariants();
  sim.destroy_stream(s);
  return recorded;
}

}  // namespace

TEST_CASE("a stream that stages many pending ranges records a fence at its next call", "[core][pending]") {
  // The requested fence is recorded by the free (the stream's next call):
  // exactly one event, and none below the threshold.
  CHECK(events_after_flushing(detail::kFenceEveryStaged + 64) == 1);
  CHECK(events_after_flushing(detail::kFenceEveryStaged - 64) == 0);
}
