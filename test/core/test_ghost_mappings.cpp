// GhostMappings (lib/arena/ghost_mappings.hpp) alone: the bookkeeping of the
// old places of moved chunks (records, each chunk's list, which granules a
// ghost covers) and the settler's veto over unmapping a pinned one. The
// Arena's use of it is tested in test_arena_ghosts.cpp and test_pinned_ghosts.cpp.
#include "core/sim_pool_fixture.hpp"

#include "arena/ghost_mappings.hpp"

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granule
auto all_unbacked = [](std::size_t, std::size_t) { return true; };

/// Maps memory at granules [first, first + granules) of the reservation at
/// `base`: the place a moved chunk left, which a ghost stands for (a ghost's
/// drop unmaps it, and one whose unmap fails stays).
void map_place(SimDriver& sim, std::uintptr_t base, std::size_t first, std::size_t granules) {
  PhysicalHandle handle = 0;
  REQUIRE(sim.physical_create(0, granules * kG, &handle) == cudaSuccess);
  REQUIRE(sim.map(base + first * kG, granules * kG, handle) == cudaSuccess);
  REQUIRE(sim.physical_release(handle) == cudaSuccess);  // the mapping keeps the memory
}

struct Settles {
  bool answer = true;
  int calls = 0;
  static bool settle(void* self, const GhostMappings::Pin&) noexcept {
    auto* s = static_cast<Settles*>(self);
    ++s->calls;
    return s->answer;
  }
};
}  // namespace

TEST_CASE("ghost mappings: kept, found, moved back to and dropped", "[core][arena][ghost]") {
  SimDriver sim(small_sim());
  std::uintptr_t base = 0;
  REQUIRE(sim.address_reserve(64 * kG, kG, &base) == cudaSuccess);
  {
    GhostMappings ghosts(sim);
    ghosts.cover(base, kG, 64);
    const std::int32_t record = ghosts.acquire(/*slot=*/3);
    REQUIRE(record != GhostMappings::kNone);
    map_place(sim, base, 4, 2);
    ghosts.keep(record, 3, /*granules=*/2, /*first=*/4, /*accessible=*/true, GhostMappings::Pin{});
    CHECK(ghosts.live() == 1);
    CHECK(ghosts.find_within(3, 2, 0, 16, all_unbacked) == 4);
    CHECK(ghosts.find_within(3, 2, 5, 16, all_unbacked) == GhostMappings::kNotFound);  // not wholly inside
    CHECK(ghosts.find_within(2, 2, 0, 16, all_unbacked) == GhostMappings::kNotFound);  // another chunk's
    CHECK(ghosts.find_within(3, 2, 0, 16, [](std::size_t, std::size_t) { return false; }) == GhostMappings::kNotFound);

    // Back to granule 4 from 10: the record now stands for 10, without access
    // there (the mapping at 4 is the chunk's from here on).
    map_place(sim, base, 10, 2);
    CHECK(ghosts.move_back(3, 2, /*from=*/10, /*to=*/4, /*accessible_from=*/false, GhostMappings::Pin{}));
    CHECK(ghosts.live() == 1);
    CHECK(ghosts.find_within(3, 2, 0, 64, all_unbacked) == GhostMappings::kNotFound);
    CHECK_FALSE(ghosts.move_back(3, 2, 4, 10, true, GhostMappings::Pin{}));  // not accessible: not a free move

    // A chunk keeps at most kPerChunk ghosts: make_room drops the oldest.
    const std::int32_t second = ghosts.acquire(3);
    map_place(sim, base, 20, 2);
    ghosts.keep(second, 3, 2, 20, true, GhostMappings::Pin{});
    CHECK(ghosts.live() == 2);
    CHECK(ghosts.make_room(3));
    CHECK(ghosts.live() == 1);
    CHECK(ghosts.find_within(3, 2, 0, 64, all_unbacked) == 20);

    // Dropped by range: only ghosts overlapping it.
    CHECK(ghosts.drop_in(0, 20));
    CHECK(ghosts.live() == 1);
    CHECK(ghosts.drop_in(21, 1));
    CHECK(ghosts.live() == 0);
    CHECK(sim.counters().mappings == 1);  // the chunk's, at 4
  }
  REQUIRE(sim.unmap(base + 4 * kG, 2 * kG) == cudaSuccess);
  CHECK(sim.address_free(base, 64 * kG) == cudaSuccess);
}

TEST_CASE("ghost mappings: a pinned ghost stays until the settler says its work is done", "[core][arena][ghost]") {
  SimDriver sim(small_sim());
  std::uintptr_t base = 0;
  REQUIRE(sim.address_reserve(64 * kG, kG, &base) == cudaSuccess);
  {
    GhostMappings ghosts(sim);
    ghosts.cover(base, kG, 64);
    Settles settles;
    ghosts.set_settler(&Settles::settle, &settles);
    int owner = 0;
    const std::int32_t pinned = ghosts.acquire(0);
    map_place(sim, base, 8, 1);
    ghosts.keep(pinned, 0, 1, 8, true, GhostMappings::Pin{&owner, 7});
    const std::int32_t unpinned = ghosts.acquire(1);
    map_place(sim, base, 9, 1);
    ghosts.keep(unpinned, 1, 1, 9, true, GhostMappings::Pin{});
    settles.answer = false;
    CHECK_FALSE(ghosts.drop_all());  // slot 0 first: vetoed, nothing after it dropped
    CHECK(settles.calls == 1);
    CHECK(ghosts.live() == 2);
    CHECK(ghosts.drop_of(1));  // no pin: no settler call
    CHECK(settles.calls == 1);
    CHECK(ghosts.live() == 1);
    settles.answer = true;
    CHECK(ghosts.drop_of(0));
    CHECK(settles.calls == 2);
    CHECK(ghosts.live() == 0);
  }
  sim.address_free(base, 64 * kG);
}

TEST_CASE("ghost mappings: a ghost whose unmap fails stays, mapped and known, until a later drop", "[core][arena][ghost]") {
  SimDriver sim(small_sim());
  std::uintptr_t base = 0;
  REQUIRE(sim.address_reserve(64 * kG, kG, &base) == cudaSuccess);
  {
    GhostMappings ghosts(sim);
    ghosts.cover(base, kG, 64);
    const std::int32_t record = ghosts.acquire(2);
    map_place(sim, base, 6, 2);
    ghosts.keep(record, 2, 2, 6, true, GhostMappings::Pin{});
    sim.fail_unmap_at(1);
    CHECK_FALSE(ghosts.drop_in(7, 1));  // forgotten, its mapping would lie under granules taken for free
    CHECK(ghosts.live() == 1);
    CHECK(ghosts.find_within(2, 2, 0, 64, all_unbacked) == 6);
    CHECK(sim.counters().mappings == 1);
    CHECK(ghosts.drop_of(2));
    CHECK(ghosts.live() == 0);
    CHECK(sim.counters().mappings == 0);
  }
  CHECK(sim.address_free(base, 64 * kG) == cudaSuccess);
}
