// Conformance (simulation and GPU): a destroyed graph's memory is back for
// the pool's statistics and trims, not only for graph_memory_stats; and the
// caller's free of a graph output is ordered after the work before it on its
// stream (docs/graphs.md, "When memory comes back"). On a GPU the release
// callback runs on CUDA's own thread some time after the last launch
// completes, so a figure that should drop is polled for.
#include "conformance/graph_fixture.hpp"

#include <chrono>
#include <thread>

using namespace sova;
using namespace sova::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// The pool's used figure (Pool::stats), polled for up to 10 s until it is
/// `expected`: a read after the release callback ran must see it collected.
std::uint64_t used_polled(Pool& pool, std::uint64_t expected) {
  std::uint64_t used = pool.stats().used_current;
  for (int i = 0; i < 10000 && used != expected; ++i) {
    std::this_thread::sleep_for(1ms);
    used = pool.stats().used_current;
  }
  return used;
}

}  // namespace

TEST_CASE("capture: once graphs are destroyed and the device synchronized, their memory is back for stats and trim",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const std::uint64_t used_before = pool.stats().used_current;
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* tmp = pool.allocate(16 * kMiB, s);
  void* out = pool.allocate(8 * kMiB, s);
  device.fill(tmp, 16 * kMiB, 0x31u, s);
  device.expect(tmp, 16 * kMiB, 0x31u, s);
  device.fill(out, 8 * kMiB, 0x32u, s);
  pool.deallocate(tmp, s);
  g.end(s);
  g.launch(s);
  device.synchronize(s);
  pool.deallocate(out, s);  // the caller's free of the graph's output
  g.destroy();
  device.synchronize_device();
  CHECK(used_polled(pool, used_before) == used_before);
  pool.trim_to(0);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
}

TEST_CASE("capture: the caller's free of a graph output waits for the work before it on its stream",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  ScopedStream reader(device);
  ScopedStream writer(device);
  constexpr std::size_t bytes = 8 * kMiB;
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* out = pool.allocate(bytes, s);
  device.fill(out, bytes, 0x41u, s);
  g.end(s);
  g.launch(s);
  device.synchronize(s);
  // A long read of the output on `reader`, then the caller's free behind it.
  device.busy(reader, 200ms);
  device.expect(out, bytes, 0x41u, reader);
  pool.deallocate(out, reader);
  g.destroy();
  CHECK(held_by_graphs(pool, 0) == 0);  // the release is collected; the read still runs
  // Another stream's block, overwritten at once: `out` only if ordered after the read.
  void* q = pool.allocate(bytes, writer);
  device.fill(q, bytes, 0x42u, writer);
  device.expect(q, bytes, 0x42u, writer);
  device.synchronize(reader);
  device.synchronize(writer);
  CHECK(device.mismatches() == 0);
  pool.deallocate(q, writer);
  pool.check_invariants();
}
