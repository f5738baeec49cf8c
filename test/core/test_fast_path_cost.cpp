// The fast path's driver calls, as pool_core.hpp states them: an allocation
// served by its stream's cache and a free onto it make no driver call with
// PoolOptions::check_streams off; with it on (the default), an allocation on
// a created stream asks two stream questions (stream_is_capturing, stream_id)
// and a free one (stream_is_capturing); on the legacy default stream, none.
// The same on a system of two devices, for a created stream of either: a
// stream's device is asked when its state is made, never per call.
#include "core/sim_pool_fixture.hpp"
#include "support/two_device_sim.hpp"

#include <cstdint>
#include <limits>

using namespace sova;
using namespace sova::test;

namespace {

constexpr int kPairs = 100;
constexpr std::size_t kBytes = 256;  // under a granule: no fence for a large free

/// Every driver call the simulation counts, summed.
std::size_t driver_calls(const SimDriver& sim) {
  const SimCounters c = sim.counters();
  return c.physical_creates + c.physical_releases + c.maps + c.unmaps + c.set_access_calls + c.events_recorded +
         c.event_queries + c.stream_waits + c.device_synchronizes + c.stream_queries;
}

/// Calls made by kPairs cache-hit pairs on `stream`, after a warm-up pair
/// that makes the stream's state and caches the block.
std::size_t calls_for_fast_pairs(SimDriver& sim, bool check_streams, cudaStream_t stream) {
  PoolOptions options = options_on(sim);
  options.check_streams = check_streams;
  options.release_threshold = std::numeric_limits<std::uint64_t>::max();  // the release worker stays out
  Pool pool(options);
  void* p = pool.allocate(kBytes, stream);
  pool.deallocate(p, stream);
  const std::uint64_t hits_before = pool.stats().fast_path_hits;
  const std::size_t before = driver_calls(sim);
  for (int i = 0; i < kPairs; ++i) {
    void* q = nullptr;
    REQUIRE(pool.try_allocate(&q, kBytes, stream) == cudaSuccess);
    REQUIRE(pool.try_deallocate(q, stream) == cudaSuccess);
  }
  const std::size_t calls = driver_calls(sim) - before;
  CHECK(pool.stats().fast_path_hits - hits_before == kPairs);  // every one a cache hit
  return calls;
}

}  // namespace

TEST_CASE("fast path: no driver call without the stream checks", "[core][fast_path]") {
  SimDriver sim(small_sim());
  const cudaStream_t stream = sim.create_stream();
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/false, stream) == 0);
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/false, nullptr) == 0);
  sim.destroy_stream(stream);
}

TEST_CASE("fast path: with the stream checks, two stream questions per allocation and one per free",
          "[core][fast_path]") {
  SimDriver sim(small_sim());
  const cudaStream_t stream = sim.create_stream();
  const std::size_t queries_before = sim.counters().stream_queries;
  const std::size_t calls = calls_for_fast_pairs(sim, /*check_streams=*/true, stream);
  CHECK(calls == 3 * kPairs);
  CHECK(sim.counters().stream_queries - queries_before >= 3 * kPairs);  // all of them stream questions
  // The legacy default stream is never checked: it cannot be captured or destroyed.
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/true, nullptr) == 0);
  sim.destroy_stream(stream);
}

TEST_CASE("fast path: with two devices, no more driver calls than with one, for either device's stream",
          "[core][fast_path][devices]") {
  SimDriver sim(two_device_sim(std::size_t{64} << 20));
  const cudaStream_t own = sim.create_stream(false, 0);
  const cudaStream_t other = sim.create_stream(false, 1);  // another device's stream on a device-0 pool
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/true, own) == 3 * kPairs);
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/true, other) == 3 * kPairs);
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/false, own) == 0);
  CHECK(calls_for_fast_pairs(sim, /*check_streams=*/false, other) == 0);
  sim.destroy_stream(other);
  sim.destroy_stream(own);
}
