// The arena's bookkeeping of backed granules and chunks (lib/arena/), on the
// simulation: commit, the word-at-a-time queries, moving and releasing chunks.
#include "core/sim_pool_fixture.hpp"

#include "arena/arena.hpp"

#include <cstring>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granule
}

TEST_CASE("arena: backed granules, chunks within a range, unbacked runs", "[core][arena]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  // Granules 1-6 (chunks of 4 and 2), 70 (past a word boundary), 130-131.
  REQUIRE(arena.commit(1 * kG, 6 * kG) == cudaSuccess);
  REQUIRE(arena.commit(70 * kG + 100, 512) == cudaSuccess);
  REQUIRE(arena.commit(130 * kG, 2 * kG) == cudaSuccess);
  CHECK(arena.backed_bytes() == 9 * kG);
  CHECK(arena.live_chunks() == 4);
  CHECK(arena.is_backed(1 * kG, 6 * kG));
  CHECK(!arena.is_backed(0, 2 * kG));
  CHECK(arena.is_backed(70 * kG + 5, 10));
  CHECK(arena.backed_bytes_in(0, 200 * kG) == 9 * kG);
  CHECK(arena.backed_bytes_in(65 * kG, 70 * kG) == 3 * kG);
  CHECK(arena.backed_prefix(1 * kG, 10 * kG) == 6 * kG);
  CHECK(arena.backed_prefix(0, kG) == 0);

  std::vector<Arena::ChunkRef> chunks;
  arena.chunks_within(0, 200 * kG, chunks);
  REQUIRE(chunks.size() == 4);
  CHECK(chunks[0].first_granule == 1);
  CHECK(chunks[0].granules == 4);
  CHECK(chunks[1].granules == 2);
  CHECK(chunks[2].first_granule == 70);
  CHECK(chunks[3].first_granule == 130);
  chunks.clear();
  arena.chunks_within(2 * kG, 100 * kG, chunks);  // cuts the first chunk: only 5-6 and 70
  CHECK(chunks.size() == 2);

  const auto runs = arena.unbacked_runs(0, 8 * kG);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0] == std::make_pair(std::size_t{0}, std::size_t{1}));
  CHECK(runs[1] == std::make_pair(std::size_t{7}, std::size_t{1}));
}

TEST_CASE("arena: a moved chunk keeps its bytes and its old range is unbacked", "[core][arena][remap]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
  auto* old_bytes = reinterpret_cast<unsigned char*>(arena.base());
  std::memset(old_bytes, 0x3C, 2 * kG);
  std::vector<Arena::ChunkRef> chunks;
  arena.chunks_within(0, 2 * kG, chunks);
  REQUIRE(chunks.size() == 1);
  // Onto backed granules: refused, nothing changes.
  REQUIRE(arena.commit(100 * kG, kG) == cudaSuccess);
  CHECK(arena.move_chunk(chunks[0].slot, 99) == cudaErrorInvalidValue);
  CHECK(arena.is_backed(0, 2 * kG));

  REQUIRE(arena.move_chunk(chunks[0].slot, 150) == cudaSuccess);
  CHECK(!arena.is_backed(0, kG));
  CHECK(arena.is_backed(150 * kG, 2 * kG));
  CHECK(arena.backed_bytes() == 3 * kG);
  CHECK(arena.chunks_moved() == 1);
  CHECK(arena.bytes_moved() == 2 * kG);
  const auto* new_bytes = reinterpret_cast<const unsigned char*>(arena.base() + 150 * kG);
  CHECK(new_bytes[0] == 0x3C);
  CHECK(new_bytes[2 * kG - 1] == 0x3C);
  CHECK(sim.counters().physical_bytes == 3 * kG);
  CHECK(arena.release_within(150 * kG, 2 * kG) == 2 * kG);
  CHECK(sim.counters().physical_bytes == kG);
}

TEST_CASE("arena: one access call per run of new chunks", "[core][arena]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  const std::size_t calls_before = sim.counters().set_access_calls;
  REQUIRE(arena.commit(0, 10 * kG) == cudaSuccess);  // chunks of 4, 4 and 2 granules
  CHECK(arena.live_chunks() == 3);
  CHECK(sim.counters().set_access_calls - calls_before == 1);
  auto* bytes = reinterpret_cast<unsigned char*>(arena.base());
  std::memset(bytes, 0x42, 10 * kG);  // every chunk accessible
  CHECK(bytes[10 * kG - 1] == 0x42);
}

TEST_CASE("arena: a chunk limit per commit, within max_chunk", "[core][arena]") {
  SimDriver sim(small_sim());
  Arena arena(sim, 0, kG, 200 * kG, 0, 4 * kG);
  // 8 granules with a limit of 3 (rounded down to granules: 3.5 -> 3): 3 + 3 + 2.
  CHECK(arena.chunks_to_create(0, 8 * kG, 3 * kG + kG / 2) == 3);
  REQUIRE(arena.commit(0, 8 * kG, 3 * kG + kG / 2) == cudaSuccess);
  std::vector<Arena::ChunkRef> chunks;
  arena.chunks_within(0, 8 * kG, chunks);
  REQUIRE(chunks.size() == 3);
  CHECK(chunks[0].granules == 3);
  CHECK(chunks[1].granules == 3);
  CHECK(chunks[2].granules == 2);
  // A limit above max_chunk (4 granules) does not lift it; 0 means max_chunk.
  CHECK(arena.chunks_to_create(10 * kG, 8 * kG, 16 * kG) == 2);
  CHECK(arena.chunks_to_create(10 * kG, 8 * kG) == 2);
  REQUIRE(arena.commit(10 * kG, 8 * kG, 16 * kG) == cudaSuccess);
  CHECK(arena.live_chunks() == 5);
}
