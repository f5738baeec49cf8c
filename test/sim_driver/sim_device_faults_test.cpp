// The simulation's device faults (lib/driver/sim/sim_faults.hpp): a copy or
// a checked kernel touching reserved VA that is not mapped, or mapped
// without the access it needs, at the moment it runs, is recorded (with
// SimConfig::abort_on_fault false) and does nothing; host memory and mapped
// memory with access are copied as before. The copy delay puts a copy after
// the host work that follows its enqueue.
#include "sim_driver/sim_test_util.hpp"

#include "support/catch.hpp"

#include <chrono>
#include <cstring>

using namespace sova;
using namespace sova::simtest;

namespace {

SimConfig recording() {
  SimConfig c;
  c.total_memory = std::size_t{64} << 20;
  c.abort_on_fault = false;
  return c;
}

/// A reservation of 4 granules with granule 1 mapped read-write; granule 0
/// stays unmapped.
struct Reserved {
  SimDriver& sim;
  std::uintptr_t va = 0;
  PhysicalHandle handle = 0;
  explicit Reserved(SimDriver& s) : sim(s) {
    REQUIRE(sim.address_reserve(4 * kG, kG, &va) == cudaSuccess);
    REQUIRE(sim.physical_create(0, kG, &handle) == cudaSuccess);
    REQUIRE(sim.map(va + kG, kG, handle) == cudaSuccess);
    REQUIRE(set_rw(sim, va + kG, kG) == cudaSuccess);
  }
  ~Reserved() {
    (void)sim.unmap(va + kG, kG);
    (void)sim.physical_release(handle);
    (void)sim.address_free(va, 4 * kG);
  }
};

}  // namespace

TEST_CASE("sim: a copy into mapped memory runs; one touching unmapped or inaccessible memory faults", "[sim]") {
  SimDriver sim(recording());
  Reserved r(sim);
  cudaStream_t s = sim.create_stream();
  std::vector<char> host(4096, 'h');

  REQUIRE(sim.memcpy_async(ptr(r.va + kG), host.data(), host.size(), s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(sim.faults() == 0);
  CHECK(ptr(r.va + kG)[4095] == 'h');

  SECTION("writing unmapped memory") {
    REQUIRE(sim.memcpy_async(ptr(r.va + 100), host.data(), host.size(), s) == cudaSuccess);
  }
  SECTION("reading unmapped memory") {
    REQUIRE(sim.memcpy_async(host.data(), ptr(r.va + 2 * kG), host.size(), s) == cudaSuccess);
  }
  SECTION("a copy running from mapped into unmapped memory") {
    REQUIRE(sim.memcpy_async(ptr(r.va + 2 * kG - 10), host.data(), 20, s) == cudaSuccess);
  }
  SECTION("memory mapped without access") {
    REQUIRE(sim.unmap(r.va + kG, kG) == cudaSuccess);
    REQUIRE(sim.map(r.va + kG, kG, r.handle) == cudaSuccess);  // no set_access: no access
    REQUIRE(sim.memcpy_async(ptr(r.va + kG), host.data(), host.size(), s) == cudaSuccess);
  }
  SECTION("memory unmapped after the copy was enqueued, before it ran") {
    sim.delay_copies(std::chrono::milliseconds(20));
    REQUIRE(sim.memcpy_async(ptr(r.va + kG), host.data(), host.size(), s) == cudaSuccess);
    REQUIRE(sim.unmap(r.va + kG, kG) == cudaSuccess);  // runs before the delayed copy
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    REQUIRE(sim.map(r.va + kG, kG, r.handle) == cudaSuccess);  // for ~Reserved
  }
  SECTION("a kernel reading unmapped memory") {
    bool ran = false;
    sim.launch_touching(s, ptr(r.va), 16, /*writes=*/false, [&] { ran = true; });
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK_FALSE(ran);
  }
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(sim.faults() == 1);
  CHECK_FALSE(sim.first_fault().empty());
  sim.destroy_stream(s);
}

TEST_CASE("sim: a checked kernel over mapped memory runs; the copy delay orders a copy after host work", "[sim]") {
  SimDriver sim(recording());
  Reserved r(sim);
  cudaStream_t s = sim.create_stream();
  bool ran = false;
  sim.launch_touching(s, ptr(r.va + kG), kG, /*writes=*/true, [&] { ran = true; });
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(ran);

  std::vector<char> host(64, 'c');
  sim.delay_copies(std::chrono::milliseconds(1000));
  REQUIRE(sim.memcpy_async(ptr(r.va + kG), host.data(), host.size(), s) == cudaSuccess);
  // The copy is still to come after the enqueue returns (shown by the
  // stream, not by a host access to the memory it writes: that would race
  // with the copy, which ThreadSanitizer reports).
  CHECK(sim.stream_query(s) == cudaErrorNotReady);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.delay_copies(std::chrono::microseconds(0));
  CHECK(ptr(r.va + kG)[0] == 'c');
  CHECK(sim.faults() == 0);
  sim.destroy_stream(s);
}
