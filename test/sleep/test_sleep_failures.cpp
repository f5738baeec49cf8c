// A driver failure at every step of sleep and of wake leaves the pool either
// awake as it was or asleep, never half; nothing is leaked; a later call
// finishes the job and every byte comes back.
#include "sleep/filled_pool.hpp"
#include "sleep/sleep_checks.hpp"

#include <functional>
#include <string>

using namespace sova;
using namespace sova::sleep_test;

namespace {

struct FailureKind {
  const char* name;
  std::function<void(SimDriver&, int)> arm;
  bool in_sleep;  ///< sleep with backup makes this call (so its first one fails)
  bool in_wake;
};

const FailureKind kKinds[] = {
    {"host_register_on", [](SimDriver& s, int n) { s.fail_host_register_at(n); }, true, false},
    {"host_map", [](SimDriver& s, int n) { s.fail_host_map_at(n); }, true, false},
    {"memcpy_async", [](SimDriver& s, int n) { s.fail_memcpy_at(n); }, true, true},
    {"unmap", [](SimDriver& s, int n) { s.fail_unmap_at(n); }, true, false},
    {"physical_create", [](SimDriver& s, int n) { s.fail_physical_create_at(n); }, false, true},
    {"map", [](SimDriver& s, int n) { s.fail_map_at(n); }, false, true},
    {"set_access", [](SimDriver& s, int n) { s.fail_set_access_at(n); }, false, true},
};

void disarm(SimDriver& sim) {
  for (const FailureKind& k : kKinds) k.arm(sim, 0);
}

SimConfig sim_config() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  return c;
}

/// The pool's memory as the driver sees it agrees with the pool's state:
/// awake, every chunk mapped; asleep, what sleep released is gone.
void check_consistent(SimDriver& sim, Pool& pool, std::uint64_t reserved_awake) {
  const PoolStats s = pool.stats();
  CHECK(sim.counters().physical_bytes == s.reserved_current);
  CHECK(s.reserved_current + s.asleep_bytes == reserved_awake);
  if (!pool.asleep()) CHECK(s.asleep_bytes == 0);
  pool.check_invariants();
}

/// Runs `steps` once for each kind of failure armed at each of the first six
/// calls of its kind, each run in a section of its own on a fresh simulation;
/// after each run, whose pools are destroyed by then, checks that nothing of
/// them is left with the driver.
void at_each_failure(const std::function<void(SimDriver&, const FailureKind&, int)>& steps) {
  for (const FailureKind& kind : kKinds) {
    for (int n = 1; n <= 6; ++n) {
      DYNAMIC_SECTION(kind.name << " failing at call " << n) {
        SimDriver sim(sim_config());
        steps(sim, kind, n);
        check_nothing_left_with_driver(sim);
      }
    }
  }
}

}  // namespace

TEST_CASE("a driver failure at any step of sleep leaves the pool awake or asleep, nothing leaked", "[sleep]") {
  at_each_failure([](SimDriver& sim, const FailureKind& kind, int n) {
    FilledPool start(sim);
    auto& [pool, stream, blocks, reserved] = start;
    kind.arm(sim, n);
    const cudaError_t error = pool.sleep(SleepMode::backup, stream);
    disarm(sim);
    if (n == 1 && kind.in_sleep) CHECK(error != cudaSuccess);
    if (n == 1 && std::string(kind.name) == "unmap") CHECK(pool.asleep());  // the copies were done: asleep
    check_consistent(sim, pool, reserved);
    if (error != cudaSuccess && !pool.asleep()) {
      // Awake as it was: every byte where it was, and the pool allocates.
      check_intact(blocks);
      void* p = pool.allocate(1000, stream);
      pool.deallocate(p, stream);
    }
    // A second sleep finishes whatever the first left undone.
    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    CHECK(pool.asleep());
    CHECK(sim.counters().physical_bytes == 0);
    REQUIRE(pool.wake(stream) == cudaSuccess);
    // Awake again: every byte back, the driver's view agreeing.
    check_intact_once_synchronized(sim, stream, blocks);
    check_consistent(sim, pool, reserved);
    free_blocks_and_stream(pool, sim, stream, blocks);
  });
}

TEST_CASE("a driver failure at any step of wake leaves the pool asleep with nothing made", "[sleep]") {
  at_each_failure([](SimDriver& sim, const FailureKind& kind, int n) {
    FilledPool start(sim);
    auto& [pool, stream, blocks, reserved] = start;
    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    const std::size_t mappings_asleep = sim.counters().mappings;
    kind.arm(sim, n);
    const cudaError_t error = pool.wake(stream);
    disarm(sim);
    if (n == 1 && kind.in_wake) CHECK(error != cudaSuccess);
    check_consistent(sim, pool, reserved);
    if (error != cudaSuccess) {
      CHECK(pool.asleep());
      CHECK(sim.counters().physical_bytes == 0);
      CHECK(sim.counters().mappings == mappings_asleep);
      REQUIRE(pool.wake(stream) == cudaSuccess);
    }
    CHECK_FALSE(pool.asleep());
    // Awake at last: every byte back, the driver's view agreeing.
    check_intact_once_synchronized(sim, stream, blocks);
    check_consistent(sim, pool, reserved);
    free_blocks_and_stream(pool, sim, stream, blocks);
  });
}

TEST_CASE("sleep with backup where the driver has no host copies is refused and changes nothing", "[sleep]") {
  // A driver written before sleep answers cudaErrorNotSupported (the Driver
  // defaults): as the sim's host_register_on failing so.
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  sim.fail_host_register_at(1, cudaErrorNotSupported);
  CHECK(pool.sleep(SleepMode::backup, stream) == cudaErrorNotSupported);
  CHECK_FALSE(pool.asleep());
  check_intact(blocks);
  CHECK(pool.sleep(SleepMode::discard, stream) == cudaSuccess);  // discard needs no copy
  CHECK(pool.wake(stream) == cudaSuccess);
  CHECK(pool.sleep(static_cast<SleepMode>(7), stream) == cudaErrorInvalidValue);
  CHECK_FALSE(pool.asleep());
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("pinning ahead more host memory than the host has is refused and changes nothing", "[sleep][pin]") {
  // reserve_sleep_backup(2**40) once succeeded on the simulation of a
  // 24 GiB host. The simulation's host now has SimConfig::pinned_host_memory.
  SimConfig c = sim_config();
  c.pinned_host_memory = std::size_t{24} << 20;  // a 24 GiB host, scaled down
  SimDriver sim(c);
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(reserved <= c.pinned_host_memory);
  CHECK(pool.reserve_sleep_backup(std::size_t{1} << 40) == cudaErrorMemoryAllocation);
  CHECK(pool.reserve_sleep_backup(c.pinned_host_memory + 1) == cudaErrorMemoryAllocation);
  CHECK(pool.stats().sleep_host_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);
  REQUIRE(pool.reserve_sleep_backup(reserved) == cudaSuccess);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}
