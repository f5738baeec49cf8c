// C API: a pool destroyed while CUDA graphs hold its blocks is finalized once
// those graphs are released: its physical memory and VA reservation go back
// to the driver (lib/capi/pool_lifetime.hpp).
#include "capi_test_util.hpp"

using namespace sova;
using namespace sova::capi_test;

TEST_CASE("C API: a pool destroyed while a graph holds its blocks is finalized once the graph is released",
          "[capi][graphs]") {
  SimDriver& d = sim();
  constexpr int device = 1;
  REQUIRE(sovaDeviceGraphMemTrim(device) == cudaSuccess);  // what the device's pools hold stays as it is from here
  const SimCounters before = d.counters();
  ScopedPool pool(device);
  ScopedStream s;
  REQUIRE(d.set_current_device(device) == cudaSuccess);
  REQUIRE(d.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* tmp = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&tmp, 4 * MiB, pool, s) == cudaSuccess);
  fill_on(s, tmp, 4 * MiB, 0x5A);
  REQUIRE(sovaFreeAsync(tmp, s) == cudaSuccess);  // freed in the graph: nobody else will free it
  cudaGraph_t graph = nullptr;
  REQUIRE(d.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(d.set_current_device(0) == cudaSuccess);
  CHECK(d.counters().physical_bytes > before.physical_bytes);

  SECTION("the graph released after the pool is destroyed") {
    REQUIRE(sovaMemPoolDestroy(pool.release()) == cudaSuccess);  // deferred: the graph holds a block
    CHECK(d.counters().reservations == before.reservations + 1);
    REQUIRE(d.graph_destroy(graph) == cudaSuccess);
    REQUIRE(sovaDeviceGraphMemTrim(device) == cudaSuccess);  // collects, and finalizes the pool
  }
  SECTION("the graph released before the pool is destroyed") {
    REQUIRE(d.graph_destroy(graph) == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool.release()) == cudaSuccess);
  }
  CHECK(d.counters().physical_bytes == before.physical_bytes);
  CHECK(d.counters().reservations == before.reservations);
}
