// The stream caches and the miss path together: what a miss flushes, and
// that loops of a few sizes stay on the fast path (docs/design.md, "A stable
// layout").
#include "core/sim_pool_fixture.hpp"

#include <vector>

using namespace sova;
using namespace sova::test;

TEST_CASE("a loop cycling through a few small sizes is served by the cache after its first round",
          "[core][cache]") {
  // A small miss keeps the stream's cache when the heap has room: before, each
  // miss flushed the block the next allocation wanted, and such a loop (the
  // threads benchmark's) missed on every allocation.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  const std::size_t sizes[] = {256, 1024, 4096, 16384, 65536};
  for (std::size_t bytes : sizes) pool.deallocate(pool.allocate(bytes, s), s);  // one round: all miss
  const PoolStats before = pool.stats();
  constexpr int kRounds = 1000;
  for (int round = 0; round < kRounds; ++round) {
    for (std::size_t bytes : sizes) pool.deallocate(pool.allocate(bytes, s), s);
  }
  const PoolStats after = pool.stats();
  CHECK(after.allocations - before.allocations == kRounds * 5);
  CHECK(after.fast_path_hits - before.fast_path_hits == kRounds * 5);
  pool.check_invariants();
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

TEST_CASE("a large miss coalesces the stream's cached large blocks, a small one leaves them cached",
          "[core][cache]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  const std::size_t part = std::size_t{2} << 20;
  void* a = pool.allocate(part, s);
  void* b = pool.allocate(part, s);
  REQUIRE(b == static_cast<char*>(a) + part);
  pool.deallocate(a, s);
  pool.deallocate(b, s);

  // A small request (in the small blocks' own region): the two cached blocks stay cached.
  void* small = pool.allocate(4096, s);
  const std::uint64_t reserved = reserved_of(pool);
  CHECK(pool.stats().cached_bytes - pool.stats().cached_small_bytes >= 2 * part);
  void* again = pool.allocate(part, s);  // a fast-path hit: the last freed of that size
  CHECK(again == b);
  pool.deallocate(again, s);

  // A large request no cached block fits: a and b coalesce and take it, no growth.
  void* whole = pool.allocate(2 * part, s);
  CHECK(whole == a);
  CHECK(reserved_of(pool) == reserved);
  pool.check_invariants();
  pool.deallocate(whole, s);
  pool.deallocate(small, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
