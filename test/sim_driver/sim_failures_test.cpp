// SimDriver: injected failures fail the n-th next call with the given error
// and change nothing; the calls around them behave normally.
#include "support/catch.hpp"

#include "sim_test_util.hpp"

using namespace sova;
using namespace sova::simtest;

TEST_CASE("sim: fail_physical_create_at fails exactly the n-th create", "[sim_driver]") {
  SimConfig cfg;
  cfg.total_memory = 8 * kG;
  SimDriver sim(cfg);
  std::size_t free_b = 0, total_b = 0;
  PhysicalHandle a = 0, b = 0, c = 0;

  sim.fail_physical_create_at(2);
  REQUIRE(sim.physical_create(0, kG, &a) == cudaSuccess);
  b = 77;
  CHECK(sim.physical_create(0, kG, &b) == cudaErrorMemoryAllocation);
  CHECK(b == 77);  // output untouched
  CHECK(sim.counters().physical_creates == 1);
  CHECK(sim.counters().physical_bytes == kG);
  REQUIRE(sim.memory_info(0, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == 7 * kG);
  REQUIRE(sim.physical_create(0, kG, &c) == cudaSuccess);  // disarmed after firing

  SECTION("any error code can be injected") {
    sim.fail_physical_create_at(1, cudaErrorInvalidValue);
    CHECK(sim.physical_create(0, kG, &b) == cudaErrorInvalidValue);
    REQUIRE(sim.physical_create(0, kG, &b) == cudaSuccess);
    REQUIRE(sim.physical_release(b) == cudaSuccess);
  }
  SECTION("n <= 0 disarms") {
    sim.fail_physical_create_at(1);
    sim.fail_physical_create_at(0);
    REQUIRE(sim.physical_create(0, kG, &b) == cudaSuccess);
    REQUIRE(sim.physical_release(b) == cudaSuccess);
  }
  SECTION("a failing call counts even if it would have failed anyway") {
    sim.fail_physical_create_at(2);
    CHECK(sim.physical_create(5, kG, &b) == cudaErrorInvalidDevice);     // call 1
    CHECK(sim.physical_create(0, kG, &b) == cudaErrorMemoryAllocation);  // call 2: injected
  }
  REQUIRE(sim.physical_release(a) == cudaSuccess);
  REQUIRE(sim.physical_release(c) == cudaSuccess);
}

TEST_CASE("sim: fail_map_at leaves the range reserved and mappable", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(2 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);

  sim.fail_map_at(1);
  CHECK(sim.map(va, kG, h) == cudaErrorUnknown);
  CHECK(sim.counters().maps == 0);
  CHECK(sim.set_access(va, kG, nullptr, 0) == cudaErrorInvalidValue);
  CHECK(set_rw(sim, va, kG) == cudaErrorInvalidValue);  // nothing is mapped
  CHECK(sim.unmap(va, kG) == cudaErrorInvalidValue);
  CHECK(touch_faults(ptr(va), false));

  REQUIRE(sim.map(va, kG, h) == cudaSuccess);
  REQUIRE(set_rw(sim, va, kG) == cudaSuccess);
  ptr(va)[0] = 3;
  CHECK(ptr(va)[0] == 3);

  sim.fail_map_at(2, cudaErrorMemoryAllocation);
  PhysicalHandle h2 = 0;
  REQUIRE(sim.physical_create(0, kG, &h2) == cudaSuccess);
  CHECK(sim.map(va, kG, h2) == cudaErrorInvalidValue);           // call 1: overlap
  CHECK(sim.map(va + kG, kG, h2) == cudaErrorMemoryAllocation);  // call 2: injected
  REQUIRE(sim.map(va + kG, kG, h2) == cudaSuccess);
  CHECK(sim.counters().maps == 2);

  REQUIRE(sim.unmap(va, kG) == cudaSuccess);
  REQUIRE(sim.unmap(va + kG, kG) == cudaSuccess);
  REQUIRE(sim.physical_release(h) == cudaSuccess);
  REQUIRE(sim.physical_release(h2) == cudaSuccess);
  REQUIRE(sim.address_free(va, 2 * kG) == cudaSuccess);
}

TEST_CASE("sim: fail_set_access_at leaves access as it was", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(kG, 0, &va) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
  REQUIRE(sim.map(va, kG, h) == cudaSuccess);

  sim.fail_set_access_at(1, cudaErrorInvalidDevice);
  CHECK(set_rw(sim, va, kG) == cudaErrorInvalidDevice);
  CHECK(sim.counters().set_access_calls == 0);
  CHECK(touch_faults(ptr(va), false));  // still no access

  REQUIRE(set_rw(sim, va, kG) == cudaSuccess);
  ptr(va)[0] = 5;

  // A failed attempt to revoke access keeps it.
  sim.fail_set_access_at(1);
  const auto none = access_desc(0, cudaMemAccessFlagsProtNone);
  CHECK(sim.set_access(va, kG, &none, 1) == cudaErrorUnknown);
  ptr(va)[1] = 6;
  CHECK(ptr(va)[0] + ptr(va)[1] == 11);
  CHECK(sim.counters().set_access_calls == 1);

  REQUIRE(sim.unmap(va, kG) == cudaSuccess);
  REQUIRE(sim.physical_release(h) == cudaSuccess);
  REQUIRE(sim.address_free(va, kG) == cudaSuccess);
}
