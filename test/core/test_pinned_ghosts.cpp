// Pinned ghosts (docs/design.md): a chunk moved from under the allocating
// stream's own pending frees keeps its old place mapped until those frees
// complete, and the wait before unmapping it is on the fence the slow path
// recorded before moving, not a device synchronize. On the simulation, whose
// counters show which driver calls were made.
#include "core/sim_pool_fixture.hpp"

#include <array>
#include <chrono>
#include <limits>

using namespace sova;
using namespace sova::test;

TEST_CASE("a pinned ghost in the way waits for its stream's fence, not for the device", "[core][remap][ghost]") {
  constexpr std::size_t kBlock = std::size_t{32} << 20;
  SimDriver sim(small_sim(std::size_t{1} << 30));
  PoolOptions options = options_on(sim);
  options.release_threshold = std::numeric_limits<std::uint64_t>::max();
  Pool pool(options);
  cudaStream_t s = sim.create_stream();
  std::array<void*, 12> blocks{};
  for (void*& b : blocks) b = pool.allocate(kBlock, s);
  sim.stream_synchronize(s);
  pool.stream_synchronized(s);
  // The even blocks' frees stay pending behind 1.5 s of work (long enough for a loaded, sanitized run).
  sim.delay(s, std::chrono::milliseconds(1500));
  for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);

  const SimCounters before = sim.counters();
  void* big = pool.allocate(4 * kBlock, s);  // beyond the growth budget: four chunks move
  REQUIRE(big != nullptr);
  SimCounters after = sim.counters();
  CHECK(pool.stats().chunks_remapped == 4);
  CHECK(pool.stats().remap_waits == 0);
  CHECK(after.events_recorded == before.events_recorded + 1);  // the fence over the frees, before the moves
  CHECK(after.device_synchronizes == before.device_synchronizes);

  std::array<void*, 3> holes{};
  for (void*& hole : holes) hole = pool.allocate(kBlock, s);
  CHECK(holes[2] == blocks[4]);  // a pinned old place: backing it unmaps the ghost there, after the fence
  after = sim.counters();
  CHECK(pool.stats().remap_waits == 1);
  CHECK(after.device_synchronizes == before.device_synchronizes);
  pool.check_invariants();

  pool.deallocate(big, s);
  for (void* p : holes) pool.deallocate(p, s);
  for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
