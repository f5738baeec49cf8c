// The stream caches and the miss path together: what a miss flushes, and
// that loops of a few sizes stay on the fast path (docs/design.md, "A stable
// layout").
#include "core/sim_pool_fixture.hpp"

#include <vector>

using namespace sova;
using namespace sova::test;

TEST_CASE("a loop cycling through a few small sizes is served by the cache after two rounds", "[core][cache]") {
  // A miss keeps the stream's small cached blocks of recurring sizes: when
  // every miss flushed the whole cache, each flushed the block the next
  // allocation wanted, and such a loop (the threads benchmark's) missed on
  // every allocation.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  const std::size_t sizes[] = {256, 1024, 4096, 16384, 65536};
  // Two rounds: the first misses (nothing cached), the second too (each miss
  // flushed the block the next wanted) but marks every size recurring.
  for (int round = 0; round < 2; ++round) {
    for (std::size_t bytes : sizes) pool.deallocate(pool.allocate(bytes, s), s);
  }
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

TEST_CASE("a miss coalesces the stream's cached blocks but the small ones of recurring sizes", "[core][cache]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  // 4096 B recurs (allocated again after a free); 8192 B does not.
  pool.deallocate(pool.allocate(4096, s), s);
  pool.deallocate(pool.allocate(8192, s), s);  // a miss: the 4096 B block is flushed here...
  void* recurring = pool.allocate(4096, s);    // ...so this is a miss too, and marks 4096 recurring
  void* one_off = pool.allocate(8192, s);      // a hit
  const std::size_t part = std::size_t{2} << 20;
  void* a = pool.allocate(part, s);
  void* b = pool.allocate(part, s);
  REQUIRE(b == static_cast<char*>(a) + part);
  pool.deallocate(a, s);
  pool.deallocate(b, s);
  pool.deallocate(recurring, s);
  pool.deallocate(one_off, s);
  const std::uint64_t reserved = reserved_of(pool);
  const std::uint64_t hits = pool.stats().fast_path_hits;

  // A miss (a size never seen): a and b go to the heap and coalesce, the
  // 8192 B block too; the 4096 B block stays cached.
  void* fresh = pool.allocate(12288, s);
  CHECK(pool.stats().cached_bytes >= 4096);
  void* again = pool.allocate(4096, s);
  CHECK(again == recurring);
  CHECK(pool.stats().fast_path_hits == hits + 1);
  void* whole = pool.allocate(2 * part, s);  // the coalesced a + b: no growth
  CHECK(whole == a);
  CHECK(reserved_of(pool) == reserved);
  pool.check_invariants();
  for (void* p : {fresh, again, whole}) pool.deallocate(p, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

TEST_CASE("blocks above 4 MiB come from the cache only as the stream's last free; else best fit places them",
          "[core][cache]") {
  // Two 8 MiB blocks side by side, freed low then high, then another block.
  // The cache would hand the high one back (the latest of that size); the
  // heap coalesces both and places the request at the start of the range,
  // where a pass that began from nothing placed it: layouts of repeated steps
  // stay alike (kLargestCachedBlock). A block freed and asked for again at
  // once stays on the fast path. 4 MiB and less: the cache, last-freed-first.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  const std::size_t mib = std::size_t{1} << 20;
  for (const std::size_t bytes : {8 * mib, 4 * mib}) {
    INFO("bytes " << bytes);
    void* low = pool.allocate(bytes, s);
    void* high = pool.allocate(bytes, s);
    void* pin = pool.allocate(bytes, s);  // keeps the pair from joining the free tail
    void* other = pool.allocate(2 * bytes, s);
    REQUIRE(static_cast<char*>(high) == static_cast<char*>(low) + bytes);
    pool.deallocate(low, s);
    pool.deallocate(high, s);
    pool.deallocate(other, s);
    PoolStats before = pool.stats();
    void* again = pool.allocate(bytes, s);
    PoolStats after = pool.stats();
    if (bytes > 4 * mib) {
      CHECK(again == low);
      CHECK(after.fast_path_hits == before.fast_path_hits);
    } else {
      CHECK(again == high);
      CHECK(after.fast_path_hits == before.fast_path_hits + 1);
    }
    // Freed and asked for at once: the same block, from the cache.
    pool.deallocate(again, s);
    before = pool.stats();
    void* same = pool.allocate(bytes, s);
    after = pool.stats();
    CHECK(same == again);
    CHECK(after.fast_path_hits == before.fast_path_hits + 1);
    pool.deallocate(same, s);
    pool.deallocate(pin, s);
    pool.check_invariants();
  }
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
