// The C API on a driver with one device (its own executable: the C API's
// process driver is fixed at the first pool, and the other C API tests use
// two devices). With one device sovaMallocAsync does not ask the driver for
// the stream's device (capi_alloc.cpp): every stream is device 0's. What
// asking also did — refusing an invalid handle — the pool's stream checks
// still do.
#include "support/catch.hpp"

#include <sova/sim.hpp>
#include <sova/sova.h>

namespace {

sova::SimDriver& one_device_sim() {
  static sova::SimDriver& driver = []() -> sova::SimDriver& {
    sova::SimConfig config;
    config.device_count = 1;
    config.total_memory = std::size_t{1} << 30;
    auto* d = new sova::SimDriver(config);  // leaked: the default pool outlives main
    (void)sova::set_process_driver(d);
    REQUIRE(&sova::process_driver() == d);
    return *d;
  }();
  return driver;
}

}  // namespace

TEST_CASE("capi, one device: sovaMallocAsync takes device 0's pool without asking for the stream's device",
          "[capi][one_device]") {
  sova::SimDriver& sim = one_device_sim();
  cudaStream_t s = sim.create_stream();
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 4096, s) == cudaSuccess);
  REQUIRE(p != nullptr);
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&pool, 0) == cudaSuccess);
  sovaMemPoolStats stats{};
  stats.structSize = sizeof stats;
  REQUIRE(sovaMemPoolGetStats(pool, &stats) == cudaSuccess);
  CHECK(stats.liveBlocks == 1);  // device 0's current pool holds it
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  void* q = nullptr;
  REQUIRE(sovaMallocAsync(&q, 4096, s) == cudaSuccess);
  CHECK(q == p);  // its cache: the fast path
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("capi, one device: an invalid stream is still refused and changes nothing", "[capi][one_device]") {
  sova::SimDriver& sim = one_device_sim();
  cudaStream_t gone = sim.create_stream();
  sim.destroy_stream(gone);
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&pool, 0) == cudaSuccess);
  sovaMemPoolStats before{};
  before.structSize = sizeof before;
  REQUIRE(sovaMemPoolGetStats(pool, &before) == cudaSuccess);
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocAsync(&p, 4096, gone) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);
  sovaMemPoolStats after{};
  after.structSize = sizeof after;
  REQUIRE(sovaMemPoolGetStats(pool, &after) == cudaSuccess);
  CHECK(after.allocations == before.allocations);
  CHECK(after.liveBlocks == before.liveBlocks);
  CHECK(after.reservedCurrent == before.reservedCurrent);
}
