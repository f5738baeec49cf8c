// C API under graph capture: sovaMallocAsync / sovaFreeAsync /
// sovaMallocFromPoolAsync on a capturing stream serve graph memory, and the
// graph-memory attributes and trim say and release what graphs hold.
#include "capi_test_util.hpp"

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::capi_test;

namespace {

std::uint64_t pool_graph_attr(sovaMemPool_t pool, cudaGraphMemAttributeType attr) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, attr, &v) == cudaSuccess);
  return v;
}

std::uint64_t device_graph_attr(int device, cudaGraphMemAttributeType attr) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaDeviceGetGraphMemAttribute(device, attr, &v) == cudaSuccess);
  return v;
}

}  // namespace

TEST_CASE("C API: allocation and free under capture give graph memory", "[capi][graphs]") {
  SimDriver& d = sim();
  ScopedPool pool;
  cudaStream_t s = d.create_stream();
  const std::uint64_t device_before = device_graph_attr(0, cudaGraphMemAttrUsedMemCurrent);

  REQUIRE(d.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* from_pool = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&from_pool, 3 * MiB, pool, s) == cudaSuccess);
  void* from_device = nullptr;
  REQUIRE(sovaMallocAsync(&from_device, 1 * MiB, s) == cudaSuccess);  // the device's current pool
  d.launch(s, [from_pool, from_device] {
    static_cast<char*>(from_pool)[0] = 1;
    static_cast<char*>(from_device)[0] = 2;
  });
  REQUIRE(sovaFreeAsync(from_device, s) == cudaSuccess);  // freed in the graph
  cudaGraph_t graph = nullptr;
  REQUIRE(d.end_capture(s, &graph) == cudaSuccess);

  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 3 * MiB);
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrReservedMemCurrent) == 3 * MiB);
  {  // the same in the pool's statistics, within what it reserves and uses
    sovaMemPoolStats stats;
    stats.structSize = sizeof stats;
    REQUIRE(sovaMemPoolGetStats(pool, &stats) == cudaSuccess);
    CHECK(stats.graphHeldBytes == 3 * MiB);
    CHECK(stats.graphHeldBlocks == 1);
    CHECK(stats.graphs == 1);
    CHECK(stats.reservedCurrent >= stats.graphHeldBytes);
    CHECK(stats.usedCurrent >= stats.graphHeldBytes);
  }
  CHECK(device_graph_attr(0, cudaGraphMemAttrUsedMemCurrent) == device_before + 1 * MiB);

  cudaGraphExec_t exec = nullptr;
  REQUIRE(d.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(d.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(d.stream_synchronize(s) == cudaSuccess);
  CHECK(static_cast<char*>(from_pool)[0] == 1);
  // Not freed in the graph: freed now, final for the caller.
  REQUIRE(sovaFreeAsync(from_pool, s) == cudaSuccess);
  CHECK(sovaFreeAsync(from_pool, s) == cudaErrorInvalidValue);
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 3 * MiB);  // still the graph's

  REQUIRE(d.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(d.graph_destroy(graph) == cudaSuccess);
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0);
  {
    sovaMemPoolStats stats;
    stats.structSize = sizeof stats;
    REQUIRE(sovaMemPoolGetStats(pool, &stats) == cudaSuccess);
    CHECK(stats.graphHeldBytes == 0);
    CHECK(stats.graphs == 0);
  }
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemHigh) == 3 * MiB);
  CHECK(device_graph_attr(0, cudaGraphMemAttrUsedMemCurrent) == device_before);

  // Trim: the graphs' memory is back in the pools and released above their thresholds.
  REQUIRE(sovaMemPoolGraphMemTrim(pool) == cudaSuccess);
  REQUIRE(sovaDeviceGraphMemTrim(0) == cudaSuccess);
  sovaMemPoolStats stats;
  stats.structSize = sizeof stats;
  REQUIRE(sovaMemPoolGetStats(pool, &stats) == cudaSuccess);
  CHECK(stats.reservedCurrent == 0);

  std::uint64_t zero = 0;
  REQUIRE(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero) == cudaSuccess);
  CHECK(device_graph_attr(0, cudaGraphMemAttrUsedMemHigh) == 0);
  d.destroy_stream(s);
}

TEST_CASE("C API: graph-memory calls refuse bad arguments and change nothing", "[capi][graphs]") {
  ScopedPool pool;
  std::uint64_t v = 7;
  CHECK(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetGraphMemAttribute(nullptr, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetGraphMemAttribute(pool, static_cast<cudaGraphMemAttributeType>(99), &v) == cudaErrorInvalidValue);
  CHECK(v == 7);
  CHECK(sovaDeviceGetGraphMemAttribute(5, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetGraphMemAttribute(0, static_cast<cudaGraphMemAttributeType>(99), &v) == cudaErrorInvalidValue);
  CHECK(v == 7);
  std::uint64_t one = 1;
  CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &one) == cudaErrorInvalidValue);
  std::uint64_t zero = 0;
  CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGraphMemTrim(nullptr) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGraphMemTrim(-1) == cudaErrorInvalidDevice);
  std::size_t count = 7;
  sovaGraphHolding holding{};
  holding.heldBytes = 9;
  CHECK(sovaMemPoolGetGraphHoldings(pool, &holding, 1, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetGraphHoldings(pool, nullptr, 1, &count) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetGraphHoldings(nullptr, &holding, 1, &count) == cudaErrorInvalidValue);
  CHECK(count == 7);
  CHECK(holding.heldBytes == 9);
}

TEST_CASE("C API: sovaMemPoolGetGraphHoldings lists each graph's memory", "[capi][graphs]") {
  SimDriver& d = sim();
  ScopedPool pool;
  cudaStream_t s = d.create_stream();
  std::size_t count = 99;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
  CHECK(count == 0);

  REQUIRE(d.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(d.stream_capture_info(s, &info) == cudaSuccess);
  void* out = nullptr;
  void* scratch = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&out, 3 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&scratch, 1 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(scratch, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(d.end_capture(s, &graph) == cudaSuccess);

  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);  // sizing
  REQUIRE(count == 1);
  sovaGraphHolding h[2];
  std::memset(h, 0xAB, sizeof h);
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, h, 2, &count) == cudaSuccess);
  REQUIRE(count == 1);
  CHECK(h[0].captureId == info.id);
  CHECK(h[0].heldBytes == 4 * MiB);
  CHECK(h[0].heldBlocks == 2);
  CHECK(h[0].outputBytes == 3 * MiB);
  CHECK(h[0].outputBlocks == 1);
  CHECK(h[0].capturing == 1);  // no call of the pool has seen the stream outside the capture yet
  CHECK(h[0].reserved[0] == 0);
  CHECK(h[1].heldBytes == 0xABABABABABABABABull);  // beyond count: not written

  REQUIRE(d.graph_destroy(graph) == cudaSuccess);
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, h, 2, &count) == cudaSuccess);
  CHECK(count == 0);
  REQUIRE(sovaFreeAsync(out, s) == cudaSuccess);
  REQUIRE(d.stream_synchronize(s) == cudaSuccess);
  d.destroy_stream(s);
}

TEST_CASE("C API: graphs of one share group hold one graph's scratch; bad handles are refused", "[capi][graphs]") {
  SimDriver& d = sim();
  ScopedPool pool;
  cudaStream_t s = d.create_stream();
  uint64_t group = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &group) == cudaSuccess);
  CHECK(group != 0);
  std::vector<cudaGraph_t> graphs;
  for (int i = 0; i < 16; ++i) {  // the runtime's case: 16 graphs captured and kept on one stream
    REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, group, s) == cudaSuccess);
    REQUIRE(d.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* scratch = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&scratch, 8 * MiB, pool, s) == cudaSuccess);
    d.launch(s, [] {});
    REQUIRE(sovaFreeAsync(scratch, s) == cudaSuccess);
    cudaGraph_t graph = nullptr;
    REQUIRE(d.end_capture(s, &graph) == cudaSuccess);
    graphs.push_back(graph);
  }
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 8 * MiB);

  sovaMemPool_t destroyed = nullptr;
  {
    ScopedPool gone;
    destroyed = gone;
  }
  uint64_t unused = 0;
  CHECK(sovaMemPoolShareGroupCreate(destroyed, &unused) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolShareGroupCreate(pool, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolShareGroupCaptureNext(pool, group, nullptr) == cudaErrorInvalidValue);  // the legacy stream
  CHECK(sovaMemPoolShareGroupCaptureNext(pool, group + 1000, s) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolShareGroupDestroy(destroyed, group) == cudaErrorInvalidValue);

  for (cudaGraph_t g : graphs) REQUIRE(d.graph_destroy(g) == cudaSuccess);
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 8 * MiB);  // the group still holds it
  REQUIRE(sovaMemPoolShareGroupDestroy(pool, group) == cudaSuccess);
  CHECK(pool_graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0);
  CHECK(sovaMemPoolShareGroupDestroy(pool, group) == cudaErrorInvalidValue);
  d.destroy_stream(s);
}
