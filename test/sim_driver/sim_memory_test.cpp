// SimDriver: devices, VA reservations, physical chunks, mapping, access and
// accounting — checked through real loads and stores, not only return codes.
#include "support/catch.hpp"

#include "sim_test_util.hpp"

#include <cstring>

using namespace sova;
using namespace sova::simtest;

TEST_CASE("sim: devices are described by SimConfig", "[sim_driver]") {
  SimConfig cfg;
  cfg.device_count = 2;
  cfg.total_memory = 64 * kG;
  SimDriver sim(cfg);
  CHECK(std::strcmp(sim.name(), "sim") == 0);

  int n = 0, cur = -1;
  REQUIRE(sim.device_count(&n) == cudaSuccess);
  CHECK(n == 2);
  REQUIRE(sim.current_device(&cur) == cudaSuccess);
  CHECK(cur == 0);

  DeviceInfo info;
  REQUIRE(sim.device_info(1, &info) == cudaSuccess);
  CHECK(info.ordinal == 1);
  CHECK(std::strcmp(info.name, "sova sim device") == 0);
  CHECK(info.total_memory == 64 * kG);
  CHECK(info.granularity == kG);
  CHECK(info.recommended_granularity == kG);
  CHECK(info.vmm_supported);
  CHECK(info.posix_fd_supported);
  CHECK_FALSE(info.fabric_supported);
  CHECK(sim.device_info(2, &info) == cudaErrorInvalidDevice);
  CHECK(sim.device_info(-1, &info) == cudaErrorInvalidDevice);

  std::size_t free_b = 0, total_b = 0;
  REQUIRE(sim.memory_info(1, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == 64 * kG);
  CHECK(total_b == 64 * kG);
  CHECK(sim.memory_info(2, &free_b, &total_b) == cudaErrorInvalidDevice);
  CHECK(sim.device_synchronize(2) == cudaErrorInvalidDevice);
}

TEST_CASE("sim: address_reserve honours size and alignment rules", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;

  SECTION("aligned to the requested power of two") {
    const std::size_t align = std::size_t{1} << 30;
    REQUIRE(sim.address_reserve(4 * kG, align, &va) == cudaSuccess);
    CHECK(va % align == 0);
    CHECK(sim.counters().reservations == 1);
    REQUIRE(sim.address_free(va, 4 * kG) == cudaSuccess);
    CHECK(sim.counters().reservations == 0);
  }
  SECTION("alignment 0 means the granularity") {
    REQUIRE(sim.address_reserve(kG, 0, &va) == cudaSuccess);
    CHECK(va % kG == 0);
    REQUIRE(sim.address_free(va, kG) == cudaSuccess);
  }
  SECTION("bad sizes and alignments") {
    CHECK(sim.address_reserve(0, 0, &va) == cudaErrorInvalidValue);
    CHECK(sim.address_reserve(kG + 4096, 0, &va) == cudaErrorInvalidValue);
    CHECK(sim.address_reserve(kG, 3 * kG, &va) == cudaErrorInvalidValue);
    CHECK(sim.counters().reservations == 0);
  }
  SECTION("address_free must name a whole live reservation") {
    REQUIRE(sim.address_reserve(2 * kG, 0, &va) == cudaSuccess);
    CHECK(sim.address_free(va, kG) == cudaErrorInvalidValue);
    CHECK(sim.address_free(va + kG, kG) == cudaErrorInvalidValue);
    REQUIRE(sim.address_free(va, 2 * kG) == cudaSuccess);
    CHECK(sim.address_free(va, 2 * kG) == cudaErrorInvalidValue);  // already freed
  }
}

TEST_CASE("sim: mapped memory is real, shared between mappings of one chunk", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(4 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);

  // Same chunk at two VAs of one reservation.
  REQUIRE(sim.map(va, kG, h) == cudaSuccess);
  REQUIRE(sim.map(va + 2 * kG, kG, h) == cudaSuccess);
  REQUIRE(set_rw(sim, va, kG) == cudaSuccess);
  REQUIRE(set_rw(sim, va + 2 * kG, kG) == cudaSuccess);

  std::memset(ptr(va), 0x5a, kG);
  ptr(va)[kG - 1] = 7;
  CHECK(ptr(va + 2 * kG)[0] == 0x5a);
  CHECK(ptr(va + 2 * kG)[kG / 2] == 0x5a);
  CHECK(ptr(va + 2 * kG)[kG - 1] == 7);
  ptr(va + 2 * kG)[123] = 9;  // and back the other way
  CHECK(ptr(va)[123] == 9);

  const SimCounters c = sim.counters();
  CHECK(c.maps == 2);
  CHECK(c.set_access_calls == 2);
  CHECK(c.physical_creates == 1);
  CHECK(c.physical_bytes == kG);

  REQUIRE(sim.unmap(va, kG) == cudaSuccess);
  CHECK(ptr(va + 2 * kG)[123] == 9);  // the other mapping still holds the bytes
  REQUIRE(sim.unmap(va + 2 * kG, kG) == cudaSuccess);
  REQUIRE(sim.physical_release(h) == cudaSuccess);
  REQUIRE(sim.address_free(va, 4 * kG) == cudaSuccess);
  CHECK(sim.counters().unmaps == 2);
  CHECK(sim.counters().physical_releases == 1);
  CHECK(sim.counters().physical_bytes == 0);
}

TEST_CASE("sim: map rejects bad ranges and changes nothing", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(4 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle two = 0, one = 0;
  REQUIRE(sim.physical_create(0, 2 * kG, &two) == cudaSuccess);
  REQUIRE(sim.physical_create(0, kG, &one) == cudaSuccess);
  REQUIRE(sim.map(va, 2 * kG, two) == cudaSuccess);

  std::uintptr_t other = 0;  // a VA just freed: no longer reserved
  REQUIRE(sim.address_reserve(kG, 0, &other) == cudaSuccess);
  REQUIRE(sim.address_free(other, kG) == cudaSuccess);

  CHECK(sim.map(other, kG, one) == cudaErrorInvalidValue);               // unreserved
  CHECK(sim.map(va, kG, one) == cudaErrorInvalidValue);                  // same start
  CHECK(sim.map(va + kG, kG, one) == cudaErrorInvalidValue);             // inside a mapping
  CHECK(sim.map(va + 4 * kG, kG, one) == cudaErrorInvalidValue);         // past the end
  CHECK(sim.map(va + 3 * kG, 2 * kG, two) == cudaErrorInvalidValue);     // straddles the end
  CHECK(sim.map(va + 2 * kG, 2 * kG, one) == cudaErrorInvalidValue);     // bytes != chunk size
  CHECK(sim.map(va + 2 * kG + 4096, kG, one) == cudaErrorInvalidValue);  // misaligned
  CHECK(sim.map(va + 2 * kG, kG, 987654) == cudaErrorInvalidValue);      // unknown handle
  CHECK(sim.counters().maps == 1);

  // The free part of the reservation is still intact and mappable.
  REQUIRE(sim.map(va + 3 * kG, kG, one) == cudaSuccess);
  REQUIRE(set_rw(sim, va + 3 * kG, kG) == cudaSuccess);
  ptr(va + 3 * kG)[0] = 1;

  CHECK(sim.unmap(va, kG) == cudaErrorInvalidValue);  // not a whole map() range
  CHECK(sim.unmap(va + kG, kG) == cudaErrorInvalidValue);
  CHECK(sim.unmap(va + 2 * kG, kG) == cudaErrorInvalidValue);    // nothing mapped there
  CHECK(sim.address_free(va, 4 * kG) == cudaErrorInvalidValue);  // still mapped
  CHECK(sim.counters().unmaps == 0);
  CHECK(sim.counters().reservations == 1);

  REQUIRE(sim.unmap(va, 2 * kG) == cudaSuccess);
  REQUIRE(sim.unmap(va + 3 * kG, kG) == cudaSuccess);
  REQUIRE(sim.address_free(va, 4 * kG) == cudaSuccess);
  REQUIRE(sim.physical_release(two) == cudaSuccess);
  REQUIRE(sim.physical_release(one) == cudaSuccess);
  CHECK(sim.physical_release(one) == cudaErrorInvalidValue);  // already released
}

TEST_CASE("sim: set_access covers whole mappings of valid devices", "[sim_driver]") {
  SimConfig cfg;
  cfg.device_count = 2;
  SimDriver sim(cfg);
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(8 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle a = 0, b = 0;
  REQUIRE(sim.physical_create(0, 2 * kG, &a) == cudaSuccess);
  REQUIRE(sim.physical_create(0, kG, &b) == cudaSuccess);
  REQUIRE(sim.map(va, 2 * kG, a) == cudaSuccess);
  REQUIRE(sim.map(va + 2 * kG, kG, b) == cudaSuccess);

  const auto rw0 = access_desc(0, cudaMemAccessFlagsProtReadWrite);
  const auto rw2 = access_desc(2, cudaMemAccessFlagsProtReadWrite);
  auto host = rw0;
  host.location.type = cudaMemLocationTypeHost;
  CHECK(sim.set_access(va, kG, &rw0, 1) == cudaErrorInvalidValue);               // cuts a mapping
  CHECK(sim.set_access(va + 2 * kG, 2 * kG, &rw0, 1) == cudaErrorInvalidValue);  // runs off
  CHECK(sim.set_access(va + 4 * kG, kG, &rw0, 1) == cudaErrorInvalidValue);      // unmapped
  CHECK(sim.set_access(va, 3 * kG, &rw2, 1) == cudaErrorInvalidDevice);
  CHECK(sim.set_access(va, 3 * kG, &host, 1) == cudaErrorInvalidValue);
  CHECK(sim.set_access(va, 3 * kG, &rw0, 0) == cudaErrorInvalidValue);
  CHECK(sim.counters().set_access_calls == 0);

  // One call over two contiguous mappings.
  REQUIRE(sim.set_access(va, 3 * kG, &rw0, 1) == cudaSuccess);
  std::memset(ptr(va), 1, 3 * kG);
  CHECK(ptr(va + 3 * kG - 1)[0] == 1);

  // Access is per device; the host sees the most permissive grant.
  const auto none0 = access_desc(0, cudaMemAccessFlagsProtNone);
  const auto rw1 = access_desc(1, cudaMemAccessFlagsProtReadWrite);
  const cudaMemAccessDesc swap[] = {none0, rw1};
  REQUIRE(sim.set_access(va, 3 * kG, swap, 2) == cudaSuccess);
  ptr(va)[5] = 2;
  CHECK(ptr(va)[5] == 2);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtRead;
  CHECK(sim.access_at(va + 3 * kG - 1, 0, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtNone);
  CHECK(sim.access_at(va + kG, 1, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  CHECK(sim.access_at(va + 3 * kG, 1, &flags) == cudaErrorInvalidValue);  // reserved, not mapped
  CHECK(sim.access_at(va, 2, &flags) == cudaErrorInvalidDevice);
  CHECK(sim.access_at(va, 1, nullptr) == cudaErrorInvalidValue);

  REQUIRE(sim.unmap(va, 2 * kG) == cudaSuccess);
  REQUIRE(sim.unmap(va + 2 * kG, kG) == cudaSuccess);
  REQUIRE(sim.physical_release(a) == cudaSuccess);
  REQUIRE(sim.physical_release(b) == cudaSuccess);
  REQUIRE(sim.address_free(va, 8 * kG) == cudaSuccess);
}

TEST_CASE("sim: inaccessible memory faults like a GPU would", "[sim_driver]") {
  SimDriver sim;
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(2 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);

  CHECK(touch_faults(ptr(va), false));  // reserved, not mapped
  REQUIRE(sim.map(va, kG, h) == cudaSuccess);
  CHECK(touch_faults(ptr(va), false));  // mapped, no access yet

  const auto ro = access_desc(0, cudaMemAccessFlagsProtRead);
  REQUIRE(sim.set_access(va, kG, &ro, 1) == cudaSuccess);
  CHECK_FALSE(touch_faults(ptr(va), false));
  CHECK(touch_faults(ptr(va), true));

  REQUIRE(set_rw(sim, va, kG) == cudaSuccess);
  CHECK_FALSE(touch_faults(ptr(va), true));

  REQUIRE(sim.unmap(va, kG) == cudaSuccess);
  CHECK(touch_faults(ptr(va), false));  // back to a bare reservation
  REQUIRE(sim.physical_release(h) == cudaSuccess);
  REQUIRE(sim.address_free(va, 2 * kG) == cudaSuccess);
}

TEST_CASE("sim: physical memory is accounted per device", "[sim_driver]") {
  SimConfig cfg;
  cfg.device_count = 2;
  cfg.total_memory = 4 * kG;
  SimDriver sim(cfg);
  std::size_t free_b = 0, total_b = 0;
  PhysicalHandle a = 0, b = 0, c = 0, d = 0;

  CHECK(sim.physical_create(2, kG, &a) == cudaErrorInvalidDevice);
  CHECK(sim.physical_create(-1, kG, &a) == cudaErrorInvalidDevice);
  CHECK(sim.physical_create(0, 0, &a) == cudaErrorInvalidValue);
  CHECK(sim.physical_create(0, kG / 2, &a) == cudaErrorInvalidValue);

  REQUIRE(sim.physical_create(0, 3 * kG, &a) == cudaSuccess);
  CHECK(sim.physical_create(0, 2 * kG, &b) == cudaErrorMemoryAllocation);  // exhausted
  REQUIRE(sim.memory_info(0, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == kG);
  CHECK(total_b == 4 * kG);
  REQUIRE(sim.physical_create(0, kG, &b) == cudaSuccess);  // exactly full
  CHECK(sim.physical_create(0, kG, &c) == cudaErrorMemoryAllocation);

  // Device 1 has its own budget.
  REQUIRE(sim.physical_create(1, 4 * kG, &d) == cudaSuccess);
  REQUIRE(sim.memory_info(1, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == 0);
  CHECK(sim.counters().physical_bytes == 8 * kG);
  CHECK(sim.counters().physical_creates == 3);

  REQUIRE(sim.physical_release(a) == cudaSuccess);
  REQUIRE(sim.memory_info(0, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == 3 * kG);
  REQUIRE(sim.physical_create(0, 3 * kG, &c) == cudaSuccess);  // room again
  CHECK(a != b);
  CHECK(a != c);  // handles are never reused
  REQUIRE(sim.physical_release(b) == cudaSuccess);
  REQUIRE(sim.physical_release(c) == cudaSuccess);
  REQUIRE(sim.physical_release(d) == cudaSuccess);
  CHECK(sim.counters().physical_bytes == 0);
}

TEST_CASE("sim: a chunk released while mapped lives until unmapped", "[sim_driver]") {
  SimConfig cfg;
  cfg.total_memory = 2 * kG;
  SimDriver sim(cfg);
  std::uintptr_t va = 0;
  REQUIRE(sim.address_reserve(2 * kG, 0, &va) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, 2 * kG, &h) == cudaSuccess);
  REQUIRE(sim.map(va, 2 * kG, h) == cudaSuccess);
  REQUIRE(set_rw(sim, va, 2 * kG) == cudaSuccess);
  ptr(va)[0] = 11;

  REQUIRE(sim.physical_release(h) == cudaSuccess);
  // Accounted free at the release; the mapping still works.
  std::size_t free_b = 0, total_b = 0;
  REQUIRE(sim.memory_info(0, &free_b, &total_b) == cudaSuccess);
  CHECK(free_b == 2 * kG);
  CHECK(ptr(va)[0] == 11);
  ptr(va)[1] = 12;
  CHECK(sim.map(va, 2 * kG, h) == cudaErrorInvalidValue);  // the handle is gone

  REQUIRE(sim.unmap(va, 2 * kG) == cudaSuccess);
  REQUIRE(sim.address_free(va, 2 * kG) == cudaSuccess);
}

TEST_CASE("sim: the destructor frees what is still held", "[sim_driver]") {
  std::uintptr_t va = 0;
  {
    SimDriver sim;
    REQUIRE(sim.address_reserve(2 * kG, 0, &va) == cudaSuccess);
    PhysicalHandle h = 0;
    REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
    REQUIRE(sim.map(va, kG, h) == cudaSuccess);
    REQUIRE(set_rw(sim, va, kG) == cudaSuccess);
    ptr(va)[0] = 1;
  }
  // The range went back to the OS: a new mapping can be placed there.
  void* p = ::mmap(ptr(va), kG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  CHECK(p == ptr(va));
  if (p != MAP_FAILED) ::munmap(p, kG);
}
