// C API in the field's shape: every device visible (the tests' simulation has
// two), the current device not 0, sovaMallocAsync / sovaFreeAsync under capture
// in every mode, and stream handles reused by another device's stream. The
// simulation refuses cuStreamGetDevice and cuStreamGetId on a capturing stream
// and invalidates its capture, as the GPU does: a capture invalidated by sova
// fails its end_capture here.
#include "capi_test_util.hpp"
#include "support/scoped_current_device.hpp"

#include <vector>

using namespace sova;
using namespace sova::capi_test;

namespace {

std::uint64_t device_graph_used(int device) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaDeviceGetGraphMemAttribute(device, cudaGraphMemAttrUsedMemCurrent, &v) == cudaSuccess);
  return v;
}

/// Captures on `stream` (of `device`, current): allocations of 4 MiB and 64
/// KiB filled and checked and freed in the graph, and one block left live by
/// it; launches the graph `launches` times; checks that the graph's memory is
/// `device`'s, that the live block reads back and frees.
void capture_alloc_fill_free(SimDriver& d, cudaStream_t stream, int device, cudaStreamCaptureMode mode,
                             int launches) {
  const std::uint64_t graph_before = device_graph_used(device);
  REQUIRE(d.begin_capture(stream, mode) == cudaSuccess);
  void* scratch = nullptr;
  void* small = nullptr;
  void* kept = nullptr;
  REQUIRE(sovaMallocAsync(&scratch, 4 * MiB, stream) == cudaSuccess);
  REQUIRE(sovaMallocAsync(&small, 64 << 10, stream) == cudaSuccess);
  REQUIRE(sovaMallocAsync(&kept, 1 * MiB, stream) == cudaSuccess);
  fill_on(stream, scratch, 4 * MiB, 0x5a);
  fill_on(stream, small, 64 << 10, 0x33);
  fill_on(stream, kept, 1 * MiB, 0x77);
  std::vector<int> bad(1, 0);
  int* bad_count = bad.data();
  d.launch(stream, [=] {
    if (!holds(scratch, 4 * MiB, 0x5a) || !holds(small, 64 << 10, 0x33)) ++*bad_count;
  });
  REQUIRE(sovaFreeAsync(small, stream) == cudaSuccess);
  REQUIRE(sovaFreeAsync(scratch, stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(d.end_capture(stream, &graph) == cudaSuccess);  // not invalidated
  INFO("dev0 " << device_graph_used(0) << " dev1 " << device_graph_used(1));
  CHECK(device_graph_used(device) > graph_before);        // the stream's device's pool holds it

  cudaGraphExec_t exec = nullptr;
  REQUIRE(d.graph_instantiate(&exec, graph) == cudaSuccess);
  for (int i = 0; i < launches; ++i) REQUIRE(d.graph_launch(exec, stream) == cudaSuccess);
  REQUIRE(d.stream_synchronize(stream) == cudaSuccess);
  CHECK(bad[0] == 0);
  CHECK(holds(kept, 1 * MiB, 0x77));
  REQUIRE(sovaFreeAsync(kept, stream) == cudaSuccess);
  REQUIRE(d.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(d.graph_destroy(graph) == cudaSuccess);
  REQUIRE(d.stream_synchronize(stream) == cudaSuccess);
}

}  // namespace

TEST_CASE("C API: capture on a stream of device 1, device 1 current, two devices visible", "[capi][graphs][devices]") {
  SimDriver& d = sim();
  const auto mode = GENERATE(cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                             cudaStreamCaptureModeRelaxed);
  const bool warmed = GENERATE(false, true);
  CAPTURE(static_cast<int>(mode), warmed);
  test::ScopedCurrentDevice current(d, 1);
  cudaStream_t s = d.create_stream(false, 1);
  if (warmed) {  // an eager allocation first: the stream's device is known before the capture
    void* p = nullptr;
    REQUIRE(sovaMallocAsync(&p, 4 * MiB, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  capture_alloc_fill_free(d, s, 1, mode, 5);
  d.destroy_stream(s);
}

TEST_CASE("C API: capture on a stream of device 0 with device 0 current, two devices visible", "[capi][graphs][devices]") {
  SimDriver& d = sim();
  const auto mode = GENERATE(cudaStreamCaptureModeGlobal, cudaStreamCaptureModeRelaxed);
  CAPTURE(static_cast<int>(mode));
  cudaStream_t s = d.create_stream(false, 0);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 4 * MiB, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  capture_alloc_fill_free(d, s, 0, mode, 5);
  // The _ptsz forms on a created stream under capture: the same.
  REQUIRE(d.begin_capture(s, mode) == cudaSuccess);
  REQUIRE(sovaMallocAsync_ptsz(&p, 2 * MiB, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync_ptsz(p, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(d.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(d.graph_destroy(graph) == cudaSuccess);
  d.destroy_stream(s);
}

TEST_CASE("C API: a stream handle reused by another device's stream allocates from that device's pool",
          "[capi][devices]") {
  SimDriver& d = sim();
  // Pools of this test's own, current on each device (the default pools may
  // hold other tests' graph memory).
  ScopedPool pool0(0);
  ScopedPool pool1(1);
  REQUIRE(sovaDeviceSetMemPool(0, pool0) == cudaSuccess);
  REQUIRE(sovaDeviceSetMemPool(1, pool1) == cudaSuccess);
  cudaStream_t first = d.create_stream(false, 0);
  void* p = nullptr;
  const std::uint64_t used0 = used(pool0);
  REQUIRE(sovaMallocAsync(&p, 2 * MiB, first) == cudaSuccess);  // the cache learns: device 0
  CHECK(used(pool0) == used0 + 2 * MiB);
  REQUIRE(sovaFreeAsync(p, first) == cudaSuccess);
  REQUIRE(d.stream_synchronize(first) == cudaSuccess);
  d.destroy_stream(first);

  cudaStream_t second = d.create_stream(false, 1);
  REQUIRE(second == first);  // the simulation hands the handle back, as the GPU does (docs/benchmarks.md)
  const std::uint64_t used1 = used(pool1);
  REQUIRE(sovaMallocAsync(&p, 3 * MiB, second) == cudaSuccess);
  CHECK(used(pool1) == used1 + 3 * MiB);  // device 1's pool, though the cache said device 0
  CHECK(used(pool0) == used0);            // device 0's pool gave back what it was asked first
  fill_on(second, p, 3 * MiB, 0x11);
  REQUIRE(sovaFreeAsync(p, second) == cudaSuccess);
  // And from now on without the detour.
  REQUIRE(sovaMallocAsync(&p, 3 * MiB, second) == cudaSuccess);
  CHECK(used(pool1) == used1 + 3 * MiB);
  REQUIRE(sovaFreeAsync(p, second) == cudaSuccess);
  REQUIRE(d.stream_synchronize(second) == cudaSuccess);
  d.destroy_stream(second);
  REQUIRE(sovaDeviceSetMemPool(0, default_pool(0)) == cudaSuccess);
  REQUIRE(sovaDeviceSetMemPool(1, default_pool(1)) == cudaSuccess);
}

TEST_CASE("C API: with two devices, a cached pair asks the driver no more than the pool's own checks",
          "[capi][devices][fast_path]") {
  SimDriver& d = sim();
  cudaStream_t s = d.create_stream(false, 1);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 4096, s) == cudaSuccess);  // learns the device, makes the state
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  constexpr int kPairs = 50;
  const std::size_t before = d.counters().stream_queries;
  for (int i = 0; i < kPairs; ++i) {
    REQUIRE(sovaMallocAsync(&p, 4096, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  // stream_is_capturing and stream_id per allocation, stream_is_capturing per
  // free (the pool's checks, as with one device); no stream_device.
  CHECK(d.counters().stream_queries - before == 3 * kPairs);
  REQUIRE(d.stream_synchronize(s) == cudaSuccess);
  d.destroy_stream(s);
}
