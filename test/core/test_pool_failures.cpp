// Driver failures during growth leave the pool and the device exactly as they were.
#include "core/sim_pool_fixture.hpp"

#include <cstring>
#include <vector>

using namespace sova;
using namespace sova::test;

TEST_CASE("a failed physical create changes nothing and the next allocation works", "[core][failure]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  void* keep = pool.allocate(std::size_t{3} << 20, s);
  const PoolStats before = pool.stats();
  const SimCounters device_before = sim.counters();

  sim.fail_physical_create_at(1);
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(pool.try_allocate(&p, std::size_t{8} << 20, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  const PoolStats after = pool.stats();
  CHECK(after.reserved_current == before.reserved_current);
  CHECK(after.used_current == before.used_current);
  CHECK(after.live_blocks == before.live_blocks);
  CHECK(sim.counters().physical_bytes == device_before.physical_bytes);
  CHECK(sim.counters().maps == device_before.maps);
  pool.check_invariants();

  void* q = pool.allocate(std::size_t{8} << 20, s);
  std::memset(q, 0x5A, std::size_t{8} << 20);  // sim memory is host memory: it must be mapped and writable
  pool.deallocate(q, s);
  pool.deallocate(keep, s);
  sim.stream_synchronize(s);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("map and set-access failures are reported as the driver's error and undone", "[core][failure]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();

  SECTION("map") { sim.fail_map_at(1, cudaErrorUnknown); }
  SECTION("set access") { sim.fail_set_access_at(1, cudaErrorUnknown); }

  void* p = nullptr;
  CHECK(pool.try_allocate(&p, std::size_t{4} << 20, s) == cudaErrorUnknown);
  CHECK(p == nullptr);
  CHECK(reserved_of(pool) == 0);
  CHECK(sim.counters().physical_bytes == 0);
  pool.check_invariants();
  void* q = pool.allocate(std::size_t{1}, s);  // no failure armed any more
  CHECK(q != nullptr);
  pool.deallocate(q, s);
  sim.destroy_stream(s);
}

TEST_CASE("growth that fails in a second run of granules undoes the first run", "[core][failure]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  const std::size_t mib = std::size_t{1} << 20;
  // Lay out: A (2 MiB) B (2 MiB) C (2 MiB); free A and C, trim so their
  // granules are unbacked while B stays: a hole, a backed granule, a hole.
  void* a = pool.allocate(2 * mib, s);
  void* b = pool.allocate(2 * mib, s);
  void* c = pool.allocate(2 * mib, s);
  pool.deallocate(a, s);
  pool.deallocate(c, s);
  pool.trim_to(0);
  REQUIRE(reserved_of(pool) == 2 * mib);
  pool.deallocate(b, s);
  // Now a 6 MiB request fits A..C's coalesced VA: commit must back A's and C's
  // granules, two separate chunks; make the second create fail.
  const SimCounters before = sim.counters();
  sim.fail_physical_create_at(2);
  void* whole = nullptr;
  const cudaError_t error = pool.try_allocate(&whole, 6 * mib, s);
  if (error == cudaSuccess) {
    // The pool may have found the memory elsewhere (after synchronizing); then
    // it must still be consistent.
    pool.deallocate(whole, s);
  } else {
    CHECK(error == cudaErrorMemoryAllocation);
    CHECK(sim.counters().physical_bytes == before.physical_bytes);
  }
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("exhausting the device gives out-of-memory; freeing makes room again", "[core][failure]") {
  SimDriver sim(small_sim(std::size_t{64} << 20));
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  const std::size_t mib = std::size_t{1} << 20;
  void* blocks[8];
  for (void*& b : blocks) b = pool.allocate(8 * mib, s);
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 8 * mib, s) == cudaErrorMemoryAllocation);
  CHECK_THROWS_AS(pool.allocate(8 * mib, s), sova::OutOfMemory);
  pool.check_invariants();
  pool.deallocate(blocks[3], s);
  pool.deallocate(blocks[4], s);
  void* big = pool.allocate(16 * mib, s);  // the two coalesce
  CHECK(big == blocks[3]);
  pool.deallocate(big, s);
  for (int i : {0, 1, 2, 5, 6, 7}) pool.deallocate(blocks[i], s);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("a full device releases a free chunk larger than the gap it must back", "[core][failure]") {
  // The device holds one 32 MiB chunk, free and complete; a small block goes
  // to the upper half of the VA (the default policy's small region) and needs
  // one new granule. Releasing the larger chunk is what makes room: a release
  // that refused to free more than the gap's 2 MiB left the request out of
  // memory on a device full of free memory.
  const std::size_t mib = std::size_t{1} << 20;
  for (const bool remap : {false, true}) {
    INFO("remap " << remap);
    SimDriver sim(small_sim(32 * mib));
    PoolOptions options = options_on(sim);
    options.remap = remap;
    options.release_threshold = ~std::uint64_t{0};
    Pool pool(options);
    cudaStream_t s = sim.create_stream();
    void* large = pool.allocate(32 * mib, s);
    REQUIRE(sim.counters().physical_bytes == 32 * mib);
    pool.deallocate(large, s);
    sim.stream_synchronize(s);
    pool.stream_synchronized(s);

    void* small = pool.allocate(256 * 1024, s);
    std::memset(small, 0x3C, 256 * 1024);  // mapped and writable
    const PoolStats stats = pool.stats();
    CHECK(stats.reserved_current == 2 * mib);
    CHECK(stats.chunks_unmapped == 1);
    CHECK(sim.counters().physical_bytes == 2 * mib);
    pool.check_invariants();
    pool.deallocate(small, s);
    sim.stream_synchronize(s);
    sim.destroy_stream(s);
  }
}

TEST_CASE("destroying a pool releases every chunk and its reservation", "[core][leak]") {
  SimDriver sim(small_sim());
  cudaStream_t s = sim.create_stream();
  {
    Pool pool(options_on(sim));
    void* live = pool.allocate(5 << 20, s);
    void* freed = pool.allocate(100, s);
    pool.deallocate(freed, s);
    CHECK(sim.counters().physical_bytes > 0);
    CHECK(sim.counters().reservations == 1);
    (void)live;  // destroyed while live: the pool still gives everything back
  }
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().reservations == 0);
  CHECK(sim.counters().physical_creates == sim.counters().physical_releases);
  sim.destroy_stream(s);
}

TEST_CASE("a device without VMM is refused with a clear error", "[core]") {
  SimConfig config = small_sim();
  config.vmm_supported = false;
  SimDriver sim(config);
  try {
    Pool pool(options_on(sim));
    FAIL("pool created without VMM");
  } catch (const sova::Error& e) {
    CHECK(e.error() == cudaErrorNotSupported);
    CHECK(std::string(e.what()).find("virtual memory management") != std::string::npos);
  }
  PoolOptions bad = options_on(sim);
  bad.device = 3;
  try {
    Pool pool(bad);
    FAIL("pool created on a missing device");
  } catch (const sova::Error& e) {
    CHECK(e.error() == cudaErrorInvalidDevice);
  }
}

namespace {

// Eight 2 MiB blocks (a chunk each) filled with their index; the even ones
// freed and made safe: 8 MiB of free physical memory in four pieces.
std::vector<void*> scatter_free_chunks(SimDriver& sim, Pool& pool, cudaStream_t s) {
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(pool.allocate(std::size_t{2} << 20, s));
    std::memset(blocks.back(), i, std::size_t{2} << 20);
  }
  for (int i = 0; i < 8; i += 2) pool.deallocate(blocks[static_cast<std::size_t>(i)], s);
  sim.stream_synchronize(s);
  pool.stream_synchronized(s);
  return blocks;
}

void check_odd_blocks_intact(const std::vector<void*>& blocks) {
  for (std::size_t i = 1; i < blocks.size(); i += 2) {
    const auto* bytes = static_cast<const unsigned char*>(blocks[i]);
    CHECK(bytes[0] == i);
    CHECK(bytes[(std::size_t{2} << 20) - 1] == i);
  }
}

}  // namespace

TEST_CASE("a map or access failure while remapping leaves chunks where they were; nothing is lost",
          "[core][failure][remap]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  cudaStream_t s = sim.create_stream();
  const std::vector<void*> blocks = scatter_free_chunks(sim, pool, s);
  const std::size_t mib = std::size_t{1} << 20;
  std::size_t expected_reserved = 16 * mib;

  // A move maps the chunk at its new place before it leaves the old one (kept
  // as a ghost, lib/arena/arena.hpp): a failed map changes nothing, and a
  // move back to the old place makes no driver call.
  std::uint64_t expected_moves = 3;
  std::uint64_t expected_moves_back = 0;
  SECTION("the move's map fails: the chunk stays where it was") {
    sim.fail_map_at(1);
    // One donor stays in place; the other three move; the one left is
    // released and a granule created in its stead (reserved does not grow
    // while free memory can pay for the request).
    expected_reserved += 0;
  }
  SECTION("the move's map fails, then the access call over the others: they go back") {
    sim.fail_map_at(1);
    sim.fail_set_access_at(1);
    // One donor stays; three move there and back (to their ghosts); the four
    // donors are then released and the block's 8 MiB created in their stead.
    expected_moves = 6;
    expected_moves_back = 3;
    expected_reserved += 0;
  }
  SECTION("the access call over the moved chunks fails: they all go back") {
    sim.fail_set_access_at(1);
    // Four moves there, four back (to their ghosts); the four donors are then
    // released and the block's 8 MiB created in their stead.
    expected_moves = 8;
    expected_moves_back = 4;
    expected_reserved += 0;
  }
  void* big = pool.allocate(8 * mib, s);
  std::memset(big, 0xEE, 8 * mib);  // mapped and writable, every byte
  check_odd_blocks_intact(blocks);
  const PoolStats stats = pool.stats();
  CHECK(stats.chunks_remapped == expected_moves);
  CHECK(stats.remaps_to_ghosts == expected_moves_back);
  CHECK(stats.reserved_current == expected_reserved);
  CHECK(sim.counters().physical_bytes == expected_reserved);  // the device agrees: nothing leaked
  pool.check_invariants();
  pool.deallocate(big, s);
  for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  sim.stream_synchronize(s);
  pool.trim_to(0);
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().mappings == 0);  // no ghost outlives its chunk
  sim.destroy_stream(s);
}
