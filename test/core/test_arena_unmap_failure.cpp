// A release whose unmap fails (Arena::destroy_chunk: trim, the release
// worker, the undo of a failed growth; GhostMappings::drop) leaves the chunk
// the pool's, mapped, backed and counted, as unback_all does for a sleep: a
// later release takes it, a growth over it is not refused, and nothing is
// left with the driver at the end. Marked unbacked with its mapping still in
// place, every later map over it would fail (a valid allocation then
// returned cudaErrorInvalidValue) and the mapping and reservation would leak.
#include "core/sim_pool_fixture.hpp"

#include "arena/arena.hpp"

#include <sova/error.hpp>

#include <vector>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granule
}  // namespace

TEST_CASE("arena: a chunk whose unmap fails stays backed and counted; a later release takes it",
          "[core][arena]") {
  SimDriver sim(small_sim());
  {
    Arena arena(sim, 0, kG, 64 * kG, 0, 2 * kG);
    REQUIRE(arena.commit(0, 8 * kG) == cudaSuccess);  // four chunks of two granules
    sim.fail_unmap_at(1);
    CHECK(arena.release_within(0, 8 * kG) == 6 * kG);  // the first stays, the others go
    CHECK(arena.backed_bytes() == 2 * kG);
    CHECK(arena.is_backed(0, 2 * kG));
    CHECK(arena.live_chunks() == 1);
    CHECK(sim.counters().mappings == 1);
    CHECK(sim.counters().physical_bytes == 2 * kG);
    REQUIRE(arena.commit(0, 8 * kG) == cudaSuccess);  // maps what went, around what stayed
    CHECK(arena.backed_bytes() == 8 * kG);
    CHECK(arena.release_within(0, 8 * kG) == 8 * kG);
    CHECK(sim.counters().mappings == 0);
  }
  CHECK(sim.counters().reservations == 0);
  CHECK(sim.counters().physical_bytes == 0);
}

TEST_CASE("arena: a ghost whose unmap fails stays, and so does its chunk", "[core][arena][ghost]") {
  SimDriver sim(small_sim());
  {
    Arena arena(sim, 0, kG, 64 * kG, 0, 2 * kG);
    REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
    std::vector<Arena::ChunkRef> chunks;
    arena.chunks_within(0, 2 * kG, chunks);
    REQUIRE(chunks.size() == 1);
    const std::int32_t slot = chunks[0].slot;
    REQUIRE(arena.move_chunk(slot, 10) == cudaSuccess);  // granules 0-1 stay mapped: a ghost
    REQUIRE(arena.live_ghosts() == 1);
    sim.fail_unmap_at(1);                      // the ghost's
    CHECK(arena.release_chunk(slot) == 0);     // the chunk cannot go before its ghost
    CHECK(arena.live_ghosts() == 1);
    CHECK(arena.is_backed(10 * kG, 2 * kG));
    CHECK(arena.backed_bytes() == 2 * kG);
    REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);  // the ghost goes first, then the map there works
    CHECK(arena.live_ghosts() == 0);
    CHECK(arena.release_within(0, 12 * kG) == 4 * kG);
    CHECK(sim.counters().mappings == 0);
  }
  CHECK(sim.counters().reservations == 0);
}

TEST_CASE("arena: a chunk whose unmap fails at destruction is tried again; nothing is left", "[core][arena]") {
  SimDriver sim(small_sim());
  {
    Arena arena(sim, 0, kG, 64 * kG, 0, 2 * kG);
    REQUIRE(arena.commit(0, 4 * kG) == cudaSuccess);
    sim.fail_unmap_at(1);
  }
  CHECK(sim.counters().mappings == 0);
  CHECK(sim.counters().reservations == 0);
  CHECK(sim.counters().physical_bytes == 0);
}

TEST_CASE("pool: a trim whose unmap fails keeps the memory; the next allocation there succeeds", "[core][arena]") {
  SimDriver sim(small_sim());
  {
    Pool pool(options_on(sim));
    cudaStream_t s = sim.create_stream();
    void* p = pool.allocate(8 * kG, s);
    const std::uint64_t reserved = pool.stats().reserved_current;
    pool.deallocate(p, s);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    sim.fail_unmap_at(1);
    pool.trim_to(0);
    // The pool counts what the device holds (trim's second pass, after its
    // synchronize, may have taken the chunk already).
    CHECK(pool.stats().reserved_current == sim.counters().physical_bytes);
    void* again = nullptr;
    CHECK_NOTHROW(again = pool.allocate(8 * kG, s));  // was cudaErrorInvalidValue
    pool.check_invariants();
    if (again != nullptr) pool.deallocate(again, s);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    pool.trim_to(0);  // a later trim takes what stayed
    CHECK(pool.stats().reserved_current == 0);
    CHECK(reserved >= 8 * kG);
    sim.destroy_stream(s);
  }
  CHECK(sim.counters().mappings == 0);
  CHECK(sim.counters().reservations == 0);
  CHECK(sim.counters().physical_bytes == 0);
}
