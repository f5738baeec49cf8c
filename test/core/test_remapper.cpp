// Remapper (lib/core/remapper.hpp) over a real Arena and Heap on the
// simulation: a free chunk moves under a block that needs backing, a move is
// undone, and a chunk is released for a gap; chunks under another stream's
// pending frees stay where they are.
#include "core/sim_pool_fixture.hpp"

#include "core/remapper.hpp"
#include "core/stream_state.hpp"  // states as the keys of pending ranges

#include <mutex>
#include <vector>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granule
constexpr std::size_t kVa = 64 * kG;
void no_complete_all(void*) noexcept {}

struct Rig {
  SimDriver sim{small_sim()};
  Arena arena{sim, 0, kG, kVa, 0, 0};
  PoolOptions options = [] {
    PoolOptions o;
    o.policy = Policy::best_fit;
    return o;
  }();
  Placement placement{options, kVa / 2};
  Heap heap{kVa, kG, placement, &no_complete_all, nullptr};
  Remapper remapper{arena, heap};
  StreamState stream;

  /// A free block [0, 2 granules) backed by one chunk, and a live block after it.
  void free_backed_chunk_at_start() {
    REQUIRE(arena.commit(0, 2 * kG) == cudaSuccess);
    Block* a = heap.carve(heap.best_fit(&stream, 2 * kG), 2 * kG);
    Block* guard = heap.carve(heap.best_fit(&stream, kG), kG);
    REQUIRE((a != nullptr && guard != nullptr));
    heap.insert_free(a);
  }
};
}  // namespace

TEST_CASE("remapper: a free chunk moves under a block that needs backing, and back", "[core][remap]") {
  Rig rig;
  std::lock_guard<HeapMutex> lock(rig.heap.mutex());
  rig.free_backed_chunk_at_start();
  const std::size_t target = 10 * kG;
  std::vector<Remapper::ChunkMove> moves;
  const std::size_t mapped = rig.remapper.move_free_chunks_into(&rig.stream, target, 2 * kG, 4, moves);
  CHECK(mapped == 1);
  REQUIRE(moves.size() == 1);
  CHECK(rig.arena.is_backed(target, 2 * kG));
  CHECK_FALSE(rig.arena.is_backed(0, kG));
  CHECK(rig.arena.backed_bytes() == 2 * kG);  // moved, not created
  rig.remapper.undo(moves);
  CHECK(rig.arena.is_backed(0, 2 * kG));
  CHECK_FALSE(rig.arena.is_backed(target, kG));
  // No moves allowed: nothing moves.
  moves.clear();
  CHECK(rig.remapper.move_free_chunks_into(&rig.stream, target, 2 * kG, 0, moves) == 0);
  CHECK(moves.empty());
}

TEST_CASE("remapper: chunks under another stream's pending frees do not move", "[core][remap]") {
  Rig rig;
  std::lock_guard<HeapMutex> lock(rig.heap.mutex());
  rig.free_backed_chunk_at_start();
  StreamState other;
  rig.heap.add_pending(&other, 0, kG, /*epoch=*/5);
  std::vector<Remapper::ChunkMove> moves;
  CHECK(rig.remapper.move_free_chunks_into(&rig.stream, 10 * kG, 2 * kG, 4, moves) == 0);
  CHECK(rig.arena.is_backed(0, 2 * kG));
  CHECK(rig.remapper.release_for_gap(kG, 4) == 0);  // nor are they released
  rig.heap.drop_complete_pending(&other, 5);
  CHECK(rig.remapper.release_for_gap(kG, 4) == 1);
  CHECK(rig.arena.backed_bytes() == 0);
}
