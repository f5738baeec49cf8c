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

TEST_CASE("arena: chunks far apart in a large arena are all found, across the summary's words", "[core][arena]") {
  // Past 64 x 64 granules the backed bitmap's summary (one bit per word) has
  // more than one word: chunks at 3, 4101 (second summary word), 8255 (the
  // last granule of the third) and none between.
  SimDriver sim(small_sim());
  const std::size_t granules = 3 * 64 * 64;
  Arena arena(sim, 0, kG, granules * kG, 0, 4 * kG);
  for (const std::size_t g : {std::size_t{3}, std::size_t{4101}, std::size_t{8255}}) {
    REQUIRE(arena.commit(g * kG, kG) == cudaSuccess);
  }
  auto first_granules = [&](std::size_t from, std::size_t count) {
    std::vector<Arena::ChunkRef> chunks;
    arena.chunks_within(from * kG, count * kG, chunks);
    std::vector<std::size_t> firsts;
    for (const Arena::ChunkRef& c : chunks) firsts.push_back(c.first_granule);
    return firsts;
  };
  CHECK(first_granules(0, granules) == std::vector<std::size_t>{3, 4101, 8255});
  CHECK(first_granules(4, granules - 4) == std::vector<std::size_t>{4101, 8255});
  CHECK(first_granules(4102, 8255 - 4102) == std::vector<std::size_t>{});  // stops before the last
  CHECK(arena.backed_bytes_in(0, granules * kG) == 3 * kG);
  CHECK(arena.unbacked_runs(0, granules * kG).size() == 4);

  // Released, the middle one is gone from the summary too; moved, found anew.
  std::vector<Arena::ChunkRef> middle;
  arena.chunks_within(4101 * kG, kG, middle);
  REQUIRE(middle.size() == 1);
  CHECK(arena.release_chunk(middle[0].slot) == kG);
  CHECK(first_granules(0, granules) == std::vector<std::size_t>{3, 8255});
  std::vector<Arena::ChunkRef> first;
  arena.chunks_within(3 * kG, kG, first);
  REQUIRE(arena.move_chunk(first[0].slot, 6000) == cudaSuccess);
  CHECK(first_granules(0, granules) == std::vector<std::size_t>{6000, 8255});
  CHECK(arena.backed_prefix(6000 * kG, 2 * kG) == kG);
}
