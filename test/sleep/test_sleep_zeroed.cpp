// SleepMode::discard_zeroed on the simulation: after wake every byte of each
// block still live reads zero (the sim's device memory is host memory, read
// once the stream is synchronized), blocks freed while asleep are free memory,
// a failed wake leaves the pool asleep and a retry zeroes, and a driver
// without memsets is refused at sleep with nothing changed.
#include "sleep/filled_pool.hpp"
#include "sleep/sleep_checks.hpp"

#include <algorithm>
#include <cstdint>

using namespace sova;
using namespace sova::sleep_test;

namespace {

SimConfig sim_config() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  return c;
}

bool all_zero(const Filled& f) {
  const auto* p = static_cast<const std::uint8_t*>(f.ptr);
  return std::all_of(p, p + f.bytes, [](std::uint8_t b) { return b == 0; });
}

/// Every block of `blocks` reads zero once `stream` is synchronized.
void check_zeroed_once_synchronized(SimDriver& sim, cudaStream_t stream, const std::vector<Filled>& blocks) {
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  for (const Filled& f : blocks) CHECK(all_zero(f));
}

}  // namespace

TEST_CASE("sleep discard_zeroed: after wake every byte of the live blocks reads zero", "[sleep][zeroed]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  const std::size_t copies = sim.counters().copies;
  REQUIRE(pool.sleep(SleepMode::discard_zeroed, stream) == cudaSuccess);
  CHECK(pool.asleep());
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(pool.stats().sleep_host_bytes == 0);  // nothing backed up
  CHECK(sim.counters().memsets == 0);         // the zeroing is wake's
  REQUIRE(pool.wake(stream) == cudaSuccess);
  CHECK(sim.counters().copies == copies);
  check_zeroed_once_synchronized(sim, stream, blocks);
  std::size_t live = 0;
  for (const Filled& f : blocks) live += f.bytes;
  CHECK(sim.counters().bytes_set >= live);
  CHECK(sim.counters().memsets <= blocks.size());  // blocks that touch share one
  CHECK(sim.faults() == 0);
  pool.check_invariants();
  // Another cycle in the same mode zeroes again.
  for (const Filled& f : blocks) fill(f);
  REQUIRE(pool.sleep(SleepMode::discard_zeroed, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_zeroed_once_synchronized(sim, stream, blocks);
  // A later backup cycle restores, it does not zero.
  for (const Filled& f : blocks) fill(f);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("sleep discard_zeroed: blocks freed while asleep are not written", "[sleep][zeroed]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(blocks.size() >= 3);
  REQUIRE(pool.sleep(SleepMode::discard_zeroed, stream) == cudaSuccess);
  std::vector<Filled> kept, freed;
  for (std::size_t i = 0; i < blocks.size(); ++i) (i % 2 == 1 ? freed : kept).push_back(blocks[i]);
  for (const Filled& f : freed) pool.deallocate(f.ptr, stream);  // accepted and final while asleep
  std::size_t kept_bytes = 0;
  for (const Filled& f : kept) kept_bytes += f.bytes;
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_zeroed_once_synchronized(sim, stream, kept);
  // Kept blocks are zeroed; the freed ones' bytes (beyond the rounding of a
  // kept neighbour) are not, so the bytes set stay near the kept ones'.
  CHECK(sim.counters().bytes_set >= kept_bytes);
  CHECK(sim.counters().bytes_set < kept_bytes + freed.size() * (std::size_t{2} << 20));
  CHECK(sim.faults() == 0);
  pool.check_invariants();
  free_blocks_and_stream(pool, sim, stream, kept);
}

TEST_CASE("sleep discard_zeroed: a failed wake leaves the pool asleep and a retry zeroes", "[sleep][zeroed]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(pool.sleep(SleepMode::discard_zeroed, stream) == cudaSuccess);
  SECTION("the memset fails") { sim.fail_memset_at(1); }
  SECTION("a map fails") { sim.fail_map_at(1); }
  CHECK(pool.wake(stream) != cudaSuccess);
  CHECK(pool.asleep());
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(pool.stats().reserved_current == 0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  CHECK_FALSE(pool.asleep());
  check_zeroed_once_synchronized(sim, stream, blocks);
  CHECK(pool.stats().reserved_current == reserved);
  CHECK(sim.faults() == 0);
  pool.check_invariants();
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("sleep discard_zeroed on a driver without memsets is refused and changes nothing", "[sleep][zeroed]") {
  SimDriver sim(sim_config());
  // The Driver default, what a driver written before memsets answers.
  Driver& base = sim;
  CHECK(base.Driver::memset_async(nullptr, 0, 0, nullptr) == cudaErrorNotSupported);
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  sim.fail_memset_at(1, cudaErrorNotSupported);  // the sleep's probe answered so
  CHECK(pool.sleep(SleepMode::discard_zeroed, stream) == cudaErrorNotSupported);
  CHECK_FALSE(pool.asleep());
  CHECK(pool.stats().reserved_current == reserved);
  check_intact(blocks);
  CHECK(pool.sleep(SleepMode::discard, stream) == cudaSuccess);  // discard needs no memset
  CHECK(pool.wake(stream) == cudaSuccess);
  CHECK(pool.sleep(static_cast<SleepMode>(3), stream) == cudaErrorInvalidValue);
  CHECK_FALSE(pool.asleep());
  free_blocks_and_stream(pool, sim, stream, blocks);
}
