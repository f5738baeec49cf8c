// The marks pin-ahead works from (sleep_pin_ahead.hpp; docs/sleep-wake.md,
// "Pinning ahead"): its target is min(budget, the most a *successful* growth
// reserved) — a growth that failed midway and was undone held no live block
// and needs no backup, though it raised reservedHigh — and the hold after
// release_sleep_host_memory lasts until a growth passes the most the pool
// ever backed, failed growths included, a peak that resetting reservedHigh
// does not lower. Progress is waited for with a bounded poll.
#include "sleep/sleep_checks.hpp"

#include "core/sleep_pin_ahead.hpp"

#include <chrono>
#include <functional>
#include <thread>

using namespace sova;
using namespace sova::sleep_test;
using namespace std::chrono_literals;

namespace {

/// A 64 MiB device: a 40 MiB growth is cut into a 32 MiB chunk and the rest,
/// so that failing the second physical_create fails it midway.
SimConfig small_device() {
  SimConfig c;
  c.total_memory = 64 * MiB;
  return c;
}

PoolOptions pin_ahead_on(SimDriver& sim) {
  PoolOptions o;
  o.driver = &sim;
  o.sleep_pin_ahead = true;
  return o;
}

/// Several of the thread's polls: for checks that it pinned nothing.
void let_pin_ahead_look() { std::this_thread::sleep_for(3 * sova::detail::kPinAheadPoll); }

/// 4 MiB live, pinned ahead; then a 40 MiB allocation whose second chunk
/// the device refuses, so that the growth is undone: reserved back at
/// 4 MiB, reservedHigh well above it. Returns the live block.
void* live_block_then_failed_growth(Pool& pool, SimDriver& sim, cudaStream_t stream) {
  void* live = pool.allocate(4 * MiB, stream);
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == 4 * MiB; }));
  sim.fail_physical_create_at(2);
  void* big = nullptr;
  REQUIRE(pool.try_allocate(&big, 40 * MiB, stream) == cudaErrorMemoryAllocation);
  const PoolStats s = pool.stats();
  REQUIRE(s.reserved_current == 4 * MiB);
  REQUIRE(s.reserved_high > 4 * MiB);  // the undone growth's first chunk was counted
  return live;
}

}  // namespace

TEST_CASE("pin-ahead's target follows successful growth, not a growth undone midway",
          "[sleep][pin_ahead][host_marks]") {
  SimDriver sim(small_device());
  Pool pool(pin_ahead_on(sim));
  cudaStream_t stream = sim.create_stream();
  void* live = live_block_then_failed_growth(pool, sim, stream);
  let_pin_ahead_look();
  const PoolStats s = pool.stats();
  CHECK(s.sleep_pin_ahead_target == 4 * MiB);  // no backup ever needs what an undone growth held
  CHECK(s.sleep_host_bytes == 4 * MiB);
  CHECK(sim.counters().pinned_host_bytes == 4 * MiB);
  pool.deallocate(live, stream);
  sim.destroy_stream(stream);
}

TEST_CASE("after release_sleep_host_memory, growth below the most ever backed does not pin again",
          "[sleep][pin_ahead][host_marks]") {
  SimDriver sim(small_device());
  Pool pool(pin_ahead_on(sim));
  cudaStream_t stream = sim.create_stream();
  void* live = live_block_then_failed_growth(pool, sim, stream);
  const std::uint64_t peak = pool.stats().reserved_high;
  REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
  REQUIRE(sim.counters().pinned_host_bytes == 0);

  // 12 MiB reserved: more than any successful growth reached, less than the
  // pool once backed. The memory given back on purpose stays given back.
  void* more = pool.allocate(8 * MiB, stream);
  REQUIRE(pool.stats().reserved_current == 12 * MiB);
  REQUIRE(pool.stats().reserved_current < peak);
  let_pin_ahead_look();
  CHECK(pool.stats().sleep_pin_ahead_target == 0);
  CHECK(pool.stats().sleep_host_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);

  // Resetting reservedHigh does not lower the mark the hold waits for.
  const std::uint64_t zero = 0;
  REQUIRE(pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &zero) == cudaSuccess);
  REQUIRE(pool.stats().reserved_high == 12 * MiB);
  void* again = pool.allocate(8 * MiB, stream);  // 20 MiB: above the reset mark, below the peak
  REQUIRE(pool.stats().reserved_current < peak);
  let_pin_ahead_look();
  CHECK(pool.stats().sleep_host_bytes == 0);

  // Past the peak the pool reserves more than it ever had: pin-ahead resumes.
  void* past = pool.allocate(peak, stream);
  const std::uint64_t grown = pool.stats().reserved_current;
  REQUIRE(grown > peak);
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == grown; }));
  CHECK(pool.stats().sleep_pin_ahead_target == grown);
  for (void* p : {live, more, again, past}) pool.deallocate(p, stream);
  sim.destroy_stream(stream);
}
