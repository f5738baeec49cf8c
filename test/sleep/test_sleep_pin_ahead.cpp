// Pin-ahead and the host memory budget (PoolOptions::sleep_pin_ahead,
// sleep_host_budget; sleep_pin_ahead.hpp): the background thread pins what a
// backup of the pool would need as the pool grows, within the budget, so that
// the first sleep pins nothing; a sleep beyond the budget is refused with
// nothing changed; release gives the memory back and holds pin-ahead until
// the pool grows; a refused pin is counted, not an error; destroy and sleep
// wait for a pin in flight. Progress is waited for with a bounded poll on the
// statistics, never a fixed sleep.
#include "sleep/filled_pool.hpp"
#include "sleep/sleep_checks.hpp"

#include "core/sleep_pin_ahead.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <thread>

using namespace sova;
using namespace sova::sleep_test;
using namespace std::chrono_literals;

namespace {

PoolOptions pin_ahead_options(SimDriver& sim, std::size_t budget = 0) {
  PoolOptions o;
  o.driver = &sim;
  o.sleep_pin_ahead = true;
  o.sleep_host_budget = budget;
  return o;
}

/// One block of `bytes`, filled: the pool grows once, so pin-ahead pins towards one target.
std::vector<Filled> one_filled_block(Pool& pool, cudaStream_t stream, std::size_t bytes) {
  std::vector<Filled> blocks{Filled{pool.allocate(bytes, stream), bytes, 11}};
  fill(blocks.back());
  return blocks;
}

/// Long enough for the pin-ahead thread to have looked again several times
/// (it polls every kPinAheadPoll): for checks that it did nothing.
void let_pin_ahead_look() { std::this_thread::sleep_for(3 * sova::detail::kPinAheadPoll); }

}  // namespace

TEST_CASE("pin-ahead pins what a backup needs as the pool grows; the first sleep pins nothing", "[sleep][pin_ahead]") {
  SimDriver sim;
  Pool pool(pin_ahead_options(sim));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = allocate_filled(pool, stream);
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(eventually([&] { return pool.stats().sleep_pin_ahead_bytes == reserved; }));
  const PoolStats pinned = pool.stats();
  CHECK(pinned.sleep_pin_ahead_target == reserved);
  CHECK(pinned.sleep_host_bytes == reserved);
  CHECK(pinned.sleep_host_budget == 0);
  CHECK(pinned.sleep_pin_ahead_failures == 0);
  CHECK(sim.counters().pinned_host_bytes == reserved);

  const std::size_t host_registers = sim.counters().host_register_calls;
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(sim.counters().host_register_calls == host_registers);  // the first sleep pinned nothing
  CHECK(sim.counters().pinned_host_bytes == reserved);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);

  // The pool grows: pin-ahead follows it.
  blocks.push_back(Filled{pool.allocate(40 * MiB, stream), 40 * MiB, 99});
  fill(blocks.back());
  const std::uint64_t grown = pool.stats().reserved_current;
  REQUIRE(grown > reserved);
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == grown; }));
  CHECK(pool.stats().sleep_pin_ahead_target == grown);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a pool without pin-ahead pins no host memory it was not asked to", "[sleep][pin_ahead]") {
  SimDriver sim;
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  let_pin_ahead_look();
  const PoolStats s = pool.stats();
  CHECK(s.sleep_pin_ahead_target == 0);
  CHECK(s.sleep_pin_ahead_bytes == 0);
  CHECK(s.sleep_host_bytes == 0);
  CHECK(sim.counters().host_register_calls == 0);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("pin-ahead stays within the budget; a sleep needing more is refused and changes nothing",
          "[sleep][pin_ahead][budget]") {
  SimDriver sim;
  Pool pool(pin_ahead_options(sim, 8 * MiB));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = allocate_filled(pool, stream);  // over 14 MiB live
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(eventually([&] { return pool.stats().sleep_pin_ahead_bytes == 8 * MiB; }));
  CHECK(pool.stats().sleep_pin_ahead_target == 8 * MiB);
  let_pin_ahead_look();
  CHECK(pool.stats().sleep_host_bytes == 8 * MiB);  // no more than the budget

  const SimCounters before = sim.counters();
  CHECK(pool.sleep(SleepMode::backup, stream) == cudaErrorMemoryAllocation);
  const SimCounters after = sim.counters();
  REQUIRE_FALSE(pool.asleep());
  CHECK(after.copies == before.copies);  // nothing copied
  CHECK(after.unmaps == before.unmaps);  // nothing released
  CHECK(after.host_register_calls == before.host_register_calls);
  const PoolStats refused = pool.stats();
  CHECK(refused.sleep_budget_refusals == 1);
  CHECK(refused.reserved_current == reserved);
  CHECK(refused.sleep_host_bytes == 8 * MiB);
  check_intact_once_synchronized(sim, stream, blocks);
  // The pool still allocates, and reserving beyond the budget is refused too.
  void* more = pool.allocate(1000, stream);
  pool.deallocate(more, stream);
  CHECK(pool.reserve_sleep_backup(16 * MiB) == cudaErrorMemoryAllocation);
  CHECK(pool.stats().sleep_budget_refusals == 2);
  CHECK(pool.stats().sleep_host_bytes == 8 * MiB);
  // Discarding needs no host memory: within any budget.
  REQUIRE(pool.sleep(SleepMode::discard, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a backup within the budget sleeps, pinning only what pin-ahead had not", "[sleep][pin_ahead][budget]") {
  SimDriver sim;
  Pool pool(pin_ahead_options(sim, 64 * MiB));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = allocate_filled(pool, stream);
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(reserved < 64 * MiB);
  REQUIRE(eventually([&] { return pool.stats().sleep_pin_ahead_bytes == reserved; }));
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(pool.stats().sleep_budget_refusals == 0);
  CHECK(pool.stats().sleep_host_bytes == reserved);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("release_sleep_host_memory gives pinned-ahead memory back; pin-ahead waits for growth or a reserve",
          "[sleep][pin_ahead]") {
  SimDriver sim;
  Pool pool(pin_ahead_options(sim));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = allocate_filled(pool, stream);
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == reserved; }));

  REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
  CHECK(sim.counters().pinned_host_bytes == 0);
  let_pin_ahead_look();
  const PoolStats held = pool.stats();
  CHECK(held.sleep_host_bytes == 0);
  CHECK(held.sleep_pin_ahead_bytes == 0);
  CHECK(held.sleep_pin_ahead_target == 0);  // held
  CHECK(sim.counters().pinned_host_bytes == 0);

  SECTION("the pool grows beyond what it had reserved: pin-ahead resumes") {
    blocks.push_back(Filled{pool.allocate(40 * MiB, stream), 40 * MiB, 7});
    const std::uint64_t grown = pool.stats().reserved_current;
    REQUIRE(eventually([&] { return pool.stats().sleep_pin_ahead_bytes == grown; }));
  }
  SECTION("reserve_sleep_backup: the hold is lifted") {
    REQUIRE(pool.reserve_sleep_backup(2 * MiB) == cudaSuccess);
    REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == reserved; }));
    CHECK(pool.stats().sleep_pin_ahead_bytes == reserved - 2 * MiB);
  }
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a pool asleep never pins ahead; after wake pin-ahead goes on", "[sleep][pin_ahead]") {
  SimDriver sim;
  // 4 slabs of 128 MiB, pinned one after another at 3 s each. The sleep comes
  // once the first is pinned: the second is then in flight (the sleep waits
  // for it) and two are left, however long the 512 MiB growth took (a fixed
  // window from the growth, 12 s, was not enough under ThreadSanitizer on a
  // loaded host: pin-ahead finished first). A slab still in flight at wake
  // ends within `eventually`'s 10 s.
  sim.delay_host_pins(3000ms);
  Pool pool(pin_ahead_options(sim));
  cudaStream_t stream = sim.create_stream();
  void* big = pool.allocate(512 * MiB, stream);
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(eventually([&] { return sim.counters().pinned_host_bytes >= 128 * MiB; }));
  REQUIRE(pool.sleep(SleepMode::discard, stream) == cudaSuccess);
  const std::size_t pinned_at_sleep = sim.counters().pinned_host_bytes;
  REQUIRE(pinned_at_sleep < reserved);
  let_pin_ahead_look();
  CHECK(sim.counters().pinned_host_bytes == pinned_at_sleep);
  CHECK(pool.stats().sleep_host_bytes == pinned_at_sleep);
  sim.delay_host_pins(0ms);  // the rest at once, after wake
  REQUIRE(pool.wake(stream) == cudaSuccess);
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == reserved; }));
  pool.deallocate(big, stream);
  sim.destroy_stream(stream);
}

TEST_CASE("a sleep waits for the slab being pinned ahead and uses it", "[sleep][pin_ahead]") {
  SimDriver sim;
  sim.delay_host_pins(1s);  // longer than filling the block takes, even under a sanitizer
  Pool pool(pin_ahead_options(sim));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = one_filled_block(pool, stream, 20 * MiB);
  const std::uint64_t reserved = pool.stats().reserved_current;  // one slab (under kPinAheadSlabBytes)
  REQUIRE(eventually([&] { return sim.counters().host_register_calls == 1; }));  // in flight
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(sim.counters().host_register_calls == 1);  // the sleep pinned nothing of its own
  CHECK(sim.counters().pinned_host_bytes == reserved);
  CHECK(pool.stats().sleep_pin_ahead_bytes == reserved);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a pool destroyed while a slab is being pinned ahead leaves nothing pinned", "[sleep][pin_ahead]") {
  SimDriver sim;
  sim.delay_host_pins(300ms);
  {
    Pool pool(pin_ahead_options(sim));
    cudaStream_t stream = sim.create_stream();
    void* block = pool.allocate(20 * MiB, stream);  // one growth: one pin, of 300 ms
    REQUIRE(eventually([&] { return sim.counters().host_register_calls == 1; }));  // in flight
    pool.deallocate(block, stream);
    sim.destroy_stream(stream);
  }  // joins the thread, then frees the slab it pinned
  CHECK(sim.counters().host_registers == sim.counters().host_register_calls);  // the pin in flight completed
  check_nothing_left_with_driver(sim);
}

TEST_CASE("a pin the host refuses in the background is counted, not an error; the sleep pins the rest",
          "[sleep][pin_ahead]") {
  SimDriver sim;
  sim.fail_host_register_at(1);
  Pool pool(pin_ahead_options(sim));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = one_filled_block(pool, stream, 20 * MiB);
  REQUIRE(eventually([&] { return pool.stats().sleep_pin_ahead_failures == 1; }));
  let_pin_ahead_look();
  const PoolStats failed = pool.stats();
  CHECK(failed.sleep_pin_ahead_failures == 1);  // not retried against a full host
  CHECK(failed.sleep_pin_ahead_target == 0);    // held until the pool grows
  CHECK(failed.sleep_host_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);

  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);  // pins its backup itself, as without pin-ahead
  CHECK(pool.stats().sleep_host_bytes > 0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);

  blocks.push_back(Filled{pool.allocate(40 * MiB, stream), 40 * MiB, 5});
  const std::uint64_t grown = pool.stats().reserved_current;
  REQUIRE(eventually([&] { return pool.stats().sleep_host_bytes == grown; }));  // growth: it tries again
  free_blocks_and_stream(pool, sim, stream, blocks);
}
