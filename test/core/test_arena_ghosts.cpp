// Ghost mappings (lib/arena/arena.hpp): a chunk that moves stays mapped at
// the place it left, so that a move back costs no driver call. On the
// simulation, whose mappings of one chunk share their bytes as on a GPU and
// whose map() refuses to map over a live mapping, so a ghost left in the way
// fails the test.
#include "core/sim_pool_fixture.hpp"
#include "support/two_device_sim.hpp"

#include "arena/arena.hpp"

#include <cstring>
#include <vector>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granule

struct DriverCalls {
  std::size_t maps, unmaps, access;
  explicit DriverCalls(const SimDriver& sim)
      : maps(sim.counters().maps), unmaps(sim.counters().unmaps), access(sim.counters().set_access_calls) {}
  bool operator==(const DriverCalls&) const = default;
};

std::int32_t only_chunk_in(const Arena& arena, std::size_t first_granule, std::size_t granules) {
  std::vector<Arena::ChunkRef> chunks;
  arena.chunks_within(first_granule * kG, granules * kG, chunks);
  REQUIRE(chunks.size() == 1);
  return chunks[0].slot;
}

unsigned char* at_granule(const Arena& arena, std::size_t granule) {
  return reinterpret_cast<unsigned char*>(arena.base() + granule * kG);
}
}  // namespace

TEST_CASE("arena: a chunk moved back to a place it left makes no driver call", "[core][arena][remap][ghost]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  const std::int32_t slot = only_chunk_in(arena, 0, 2);
  std::memset(at_granule(arena, 0), 0x3C, 2 * kG);

  const DriverCalls before_move(sim);
  REQUIRE(arena.move_chunk(slot, 150) == cudaSuccess);
  const DriverCalls after_move(sim);
  CHECK(after_move.maps == before_move.maps + 1);
  CHECK(after_move.unmaps == before_move.unmaps);  // the old place stays mapped: a ghost
  CHECK(after_move.access == before_move.access + 1);
  CHECK(arena.live_ghosts() == 1);
  CHECK(!arena.is_backed(0, 2 * kG));  // unbacked to the pool, whatever is mapped there
  CHECK(at_granule(arena, 150)[2 * kG - 1] == 0x3C);
  CHECK(arena.ghost_within(slot, 0, 2) == 0);
  CHECK(arena.ghost_within(slot, 1, 10) == Arena::kNoGhost);  // not wholly inside

  bool mapped = true;
  REQUIRE(arena.move_chunk(slot, 0, /*with_access=*/true, &mapped) == cudaSuccess);
  CHECK(!mapped);
  CHECK(DriverCalls(sim) == after_move);  // back to the ghost: nothing asked of the driver
  CHECK(arena.is_backed(0, 2 * kG));
  CHECK(!arena.is_backed(150 * kG, 2 * kG));
  CHECK(arena.chunks_moved() == 2);
  CHECK(arena.ghost_moves() == 1);
  CHECK(arena.live_ghosts() == 1);  // now at 150
  CHECK(arena.ghost_within(slot, 100, 60) == 150);
  CHECK(arena.backed_bytes() == 2 * kG);
  CHECK(sim.counters().physical_bytes == 2 * kG);  // physical memory counted once
  // Same bytes at both places: the ghost is that chunk's memory.
  std::memset(at_granule(arena, 0), 0x5A, 2 * kG);
  CHECK(at_granule(arena, 150)[0] == 0x5A);
}

TEST_CASE("arena: a ghost is unmapped before anything else is mapped over its place", "[core][arena][remap][ghost]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  const std::int32_t a = only_chunk_in(arena, 0, 2);
  std::memset(at_granule(arena, 0), 0xA1, 2 * kG);
  REQUIRE(arena.move_chunk(a, 150) == cudaSuccess);  // ghost at 0

  SECTION("a new chunk") {
    const std::size_t unmaps = sim.counters().unmaps;
    REQUIRE(arena.commit(kG, 4 * kG) == cudaSuccess);  // granules 1-4: overlaps the ghost at 0-1
    CHECK(sim.counters().unmaps == unmaps + 1);
    CHECK(arena.live_ghosts() == 0);
    CHECK(arena.ghost_within(a, 0, 2) == Arena::kNoGhost);
    std::memset(at_granule(arena, 1), 0xB2, 4 * kG);
    CHECK(at_granule(arena, 150)[0] == 0xA1);  // the new chunk's bytes are its own
    CHECK(at_granule(arena, 151)[kG - 1] == 0xA1);
  }
  SECTION("another chunk's move") {
    REQUIRE(arena.commit(20 * kG, 2 * kG) == cudaSuccess);
    const std::int32_t b = only_chunk_in(arena, 20, 2);
    std::memset(at_granule(arena, 20), 0xB2, 2 * kG);
    const std::size_t unmaps = sim.counters().unmaps;
    bool mapped = false;
    REQUIRE(arena.move_chunk(b, 0, /*with_access=*/true, &mapped) == cudaSuccess);
    CHECK(mapped);
    CHECK(sim.counters().unmaps == unmaps + 1);  // a's ghost
    CHECK(arena.live_ghosts() == 1);             // b's, at 20
    CHECK(at_granule(arena, 0)[0] == 0xB2);
    CHECK(at_granule(arena, 150)[0] == 0xA1);
    // a cannot go back to 0 for nothing any more: moving it there is refused
    // (backed), and its only place left is where it is.
    CHECK(arena.move_chunk(a, 0) == cudaErrorInvalidValue);
  }
  CHECK(arena.backed_bytes() == sim.counters().physical_bytes);
}

TEST_CASE("arena: a chunk keeps its two newest ghosts; releasing it unmaps them all", "[core][arena][remap][ghost]") {
  SimDriver sim(small_sim());
  {
    Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
    REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
    const std::int32_t slot = only_chunk_in(arena, 0, 2);
    const std::size_t unmaps = sim.counters().unmaps;
    REQUIRE(arena.move_chunk(slot, 20) == cudaSuccess);
    REQUIRE(arena.move_chunk(slot, 40) == cudaSuccess);
    CHECK(sim.counters().unmaps == unmaps);
    REQUIRE(arena.move_chunk(slot, 60) == cudaSuccess);  // the ghost at 0, the oldest, goes
    CHECK(sim.counters().unmaps == unmaps + 1);
    CHECK(arena.live_ghosts() == 2);
    CHECK(arena.ghost_within(slot, 0, 2) == Arena::kNoGhost);
    CHECK(arena.ghost_within(slot, 20, 2) == 20);
    CHECK(arena.ghost_within(slot, 40, 2) == 40);
    CHECK(sim.counters().mappings == 3);

    CHECK(arena.release_chunk(slot) == 2 * kG);
    CHECK(arena.live_ghosts() == 0);
    CHECK(sim.counters().mappings == 0);
    CHECK(sim.counters().physical_bytes == 0);

    REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
    REQUIRE(arena.move_chunk(only_chunk_in(arena, 0, 2), 20) == cudaSuccess);
  }
  // The arena's destructor unmapped the ghost too: the reservation could go.
  CHECK(sim.counters().mappings == 0);
  CHECK(sim.counters().reservations == 0);
}

TEST_CASE("arena: a change of peer access unmaps every ghost", "[core][arena][remap][ghost][devices]") {
  SimDriver sim(two_device_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  const std::int32_t slot = only_chunk_in(arena, 0, 2);
  REQUIRE(arena.move_chunk(slot, 150) == cudaSuccess);
  REQUIRE(arena.live_ghosts() == 1);

  cudaMemAccessDesc peer{};
  peer.location.type = cudaMemLocationTypeDevice;
  peer.location.id = 1;
  peer.flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(arena.set_peer_access(&peer, 1) == cudaSuccess);
  // The ghost had only the owner's access: a move back to it would have
  // handed device 1 memory it cannot reach.
  CHECK(arena.live_ghosts() == 0);
  bool mapped = false;
  REQUIRE(arena.move_chunk(slot, 0, /*with_access=*/true, &mapped) == cudaSuccess);
  CHECK(mapped);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  REQUIRE(sim.access_at(arena.base(), 1, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
}

TEST_CASE("arena: a place left before its access was granted is no ghost to move back to",
          "[core][arena][remap][ghost]") {
  // Remapping maps moved chunks without access and grants it over the run
  // once; if that call fails they move back. The places they leave then hold
  // mappings without access: a move back there for free would hand out
  // memory the device cannot reach.
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  const std::int32_t slot = only_chunk_in(arena, 0, 2);
  REQUIRE(arena.move_chunk(slot, 150, /*with_access=*/false) == cudaSuccess);  // no grant follows
  bool mapped = true;
  REQUIRE(arena.move_chunk(slot, 0, /*with_access=*/true, &mapped) == cudaSuccess);
  CHECK(!mapped);  // back to 0, which had its access
  CHECK(arena.live_ghosts() == 1);
  CHECK(arena.ghost_within(slot, 100, 100) == Arena::kNoGhost);  // 150 has no access

  const std::size_t unmaps = sim.counters().unmaps;
  REQUIRE(arena.move_chunk(slot, 150, /*with_access=*/true, &mapped) == cudaSuccess);
  CHECK(mapped);                               // mapped anew, with access
  CHECK(sim.counters().unmaps == unmaps + 1);  // the mapping without access went first
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  REQUIRE(sim.access_at(arena.base() + 150 * kG, 0, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);

  // Granted later, a place is a ghost like any other.
  REQUIRE(arena.move_chunk(slot, 40, /*with_access=*/false) == cudaSuccess);
  REQUIRE(arena.grant_access(40, 2) == cudaSuccess);
  REQUIRE(arena.move_chunk(slot, 150, /*with_access=*/true, &mapped) == cudaSuccess);
  CHECK(!mapped);
  CHECK(arena.ghost_within(slot, 30, 20) == 40);
}

namespace {
// A settler that records what it was asked and answers `allow`.
struct RecordingSettler {
  bool allow = false;
  std::vector<std::uint64_t> asked;  // the pins' epochs, in order
  static bool settle(void* self, const Arena::GhostPin& pin) noexcept {
    auto* me = static_cast<RecordingSettler*>(self);
    me->asked.push_back(pin.epoch);
    return me->allow;
  }
};
}  // namespace

TEST_CASE("arena: a pinned ghost is unmapped only once its settler says its work is done",
          "[core][arena][remap][ghost]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  RecordingSettler settler;
  arena.set_ghost_settler(&RecordingSettler::settle, &settler);
  int owner = 0;  // any address: opaque to the arena
  const Arena::GhostPin pin{&owner, 7};
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  const std::int32_t slot = only_chunk_in(arena, 0, 2);
  REQUIRE(arena.move_chunk(slot, 150, true, nullptr, &pin) == cudaSuccess);  // leaves a pinned ghost at 0
  CHECK(settler.asked.empty());                                              // moving away asks nothing

  // Refused: whatever needs the old place fails, and nothing changes.
  const DriverCalls before(sim);
  CHECK(arena.commit(0, 2 * kG) == cudaErrorNotReady);
  REQUIRE(arena.commit(20 * kG, 2 * kG) == cudaSuccess);
  const std::int32_t other = only_chunk_in(arena, 20, 2);
  CHECK(arena.move_chunk(other, 0) == cudaErrorNotReady);
  CHECK(arena.release_chunk(slot) == 0);  // its ghost is pinned: not released either
  CHECK(settler.asked == std::vector<std::uint64_t>{7, 7, 7});
  CHECK(arena.live_ghosts() == 1);
  CHECK(!arena.is_backed(0, 2 * kG));
  CHECK(arena.is_backed(150 * kG, 2 * kG));
  CHECK(arena.is_backed(20 * kG, 2 * kG));
  CHECK(sim.counters().unmaps == before.unmaps);  // the ghost stayed mapped throughout
  CHECK(arena.ghost_within(slot, 0, 2) == 0);     // and the chunk may still go back to it

  // Moving back to the pinned ghost needs no unmap, so no settling.
  REQUIRE(arena.move_chunk(slot, 0) == cudaSuccess);
  CHECK(settler.asked.size() == 3);
  REQUIRE(arena.move_chunk(slot, 150) == cudaSuccess);  // pinned no more: the new ghost has no pin

  // Allowed: the ghost goes, then the mapping is made.
  settler.allow = true;
  REQUIRE(arena.move_chunk(slot, 0, true, nullptr, &pin) == cudaSuccess);  // back to 0, pinning 150
  CHECK(arena.commit(150 * kG, 2 * kG) == cudaSuccess);
  CHECK(settler.asked.size() == 4);
  CHECK(arena.live_ghosts() == 0);
  CHECK(arena.is_backed(150 * kG, 2 * kG));
}
