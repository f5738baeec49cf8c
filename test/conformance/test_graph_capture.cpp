// Conformance: allocation and free under CUDA graph capture, with the
// semantics of graph memory nodes (docs/graphs.md). Runs on the simulation's
// capture model and on a GPU's real capture.
//
// Every block a graph uses gets a tag written and checked by the graph's own
// kernels, in stream order, at every launch; eager work on other streams
// writes and checks its own tags at the same time. Memory handed to both, or
// reused by a capture out of order, shows up as mismatches.
#include "conformance/graph_fixture.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

}  // namespace

TEST_CASE("capture: an alloc-kernel-free sequence captured once runs 1000 launches in stream order",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  ScopedStream eager(device);
  const PoolStats before = pool.stats();

  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* a = pool.allocate(1 * kMiB, s);
  device.fill(a, 1 * kMiB, 0xA1u, s);
  void* b = pool.allocate(64 * kKiB, s);
  device.fill(b, 64 * kKiB, 0xB2u, s);
  device.expect(a, 1 * kMiB, 0xA1u, s);
  pool.deallocate(a, s);
  void* c = pool.allocate(512 * kKiB, s);  // after a's free, on the same stream: a's block
  CHECK(c == a);
  device.fill(c, 512 * kKiB, 0xC3u, s);
  device.expect(b, 64 * kKiB, 0xB2u, s);
  device.expect(c, 512 * kKiB, 0xC3u, s);
  pool.deallocate(b, s);
  pool.deallocate(c, s);
  g.end(s);
  // Nothing ran during capture, and the graph holds its two blocks.
  CHECK(pool.graph_memory_stats().held_blocks == 2);
  CHECK(held_by_graphs(pool, 1 * kMiB + 64 * kKiB) == 1 * kMiB + 64 * kKiB);

  // Eager work meanwhile, on another stream: never gets the graph's memory.
  launch_beside_eager(device, pool, g, s, eager, 1000, 50, a, b);
  device.synchronize(s);
  device.synchronize(eager);
  CHECK(device.mismatches() == 0);
  g.destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  CHECK(pool.graph_memory_stats().released_graphs == 1);
  CHECK(pool.stats().live_blocks == before.live_blocks);
  pool.check_invariants();
}

TEST_CASE("capture: an allocation not freed in the graph stays valid across launches, then is freed",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* kept = pool.allocate(256 * kKiB, s);
  device.fill(kept, 256 * kKiB, 0x77u, s);
  g.end(s);
  for (int i = 0; i < 5; ++i) {
    g.launch(s);
    device.expect(kept, 256 * kKiB, 0x77u, s);  // eager work reads what the launch wrote
  }
  // Freed after the launches: accepted once, final for the caller.
  REQUIRE(pool.try_deallocate(kept, s) == cudaSuccess);
  CHECK(pool.try_deallocate(kept, s) == cudaErrorInvalidValue);
  // Its memory stays with the graph: launching again is safe.
  g.launch(s);
  device.expect(kept, 256 * kKiB, 0x77u, s);
  void* other = pool.allocate(256 * kKiB, s);
  CHECK(other != kept);
  device.fill(other, 256 * kKiB, 0x55u, s);
  device.expect(kept, 256 * kKiB, 0x77u, s);
  pool.deallocate(other, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  CHECK(held_by_graphs(pool, 256 * kKiB) == 256 * kKiB);
  g.destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  pool.check_invariants();
}

TEST_CASE("capture: graphs destroyed out of order give back exactly their own memory", "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const std::size_t sizes[3] = {1 * kMiB, 2 * kMiB, 3 * kMiB};
  std::vector<std::unique_ptr<Graph>> graphs;
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    graphs.push_back(std::make_unique<Graph>(device));
    REQUIRE(device.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    void* p = pool.allocate(sizes[i], s);
    device.fill(p, sizes[i], 0x100u + i, s);
    device.expect(p, sizes[i], 0x100u + i, s);
    graphs.back()->end(s);
    blocks.push_back(p);
  }
  CHECK(blocks[0] != blocks[1]);
  CHECK(blocks[1] != blocks[2]);
  for (auto& g : graphs) g->launch(s);
  CHECK(held_by_graphs(pool, 6 * kMiB) == 6 * kMiB);
  graphs[1]->destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 4 * kMiB) == 4 * kMiB);
  graphs[0]->launch(s);  // the others still run, unharmed
  graphs[2]->launch(s);
  graphs[0]->destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 3 * kMiB) == 3 * kMiB);
  graphs[2]->launch(s);
  graphs[2]->destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  CHECK(pool.graph_memory_stats().held_bytes_high == 6 * kMiB);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
}

TEST_CASE("capture: other threads allocate eagerly during a global-mode capture, which stays valid",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0};
  // Streams made before the capture: only allocation work runs during it.
  std::vector<std::unique_ptr<ScopedStream>> streams;
  for (int t = 0; t < 3; ++t) streams.push_back(std::make_unique<ScopedStream>(device));
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t mine = *streams[t];
      const std::uint32_t tag = 0xE000u + t;
      for (int i = 0; !stop.load() || i < 20; ++i) {
        const std::size_t bytes = (1 + (i * 7 + t) % 5) * kMiB;  // growth, too
        void* p = nullptr;
        if (pool.try_allocate(&p, bytes, mine) != cudaSuccess) {
          failures.fetch_add(1);
          continue;
        }
        device.fill(p, bytes, tag, mine);
        device.expect(p, bytes, tag, mine);
        pool.deallocate(p, mine);
      }
    });
  }
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  std::vector<void*> mine;
  for (int i = 0; i < 8; ++i) {
    void* p = pool.allocate((i + 1) * kMiB, s);
    device.fill(p, (i + 1) * kMiB, 0x600u + i, s);
    mine.push_back(p);
  }
  for (int i = 0; i < 8; ++i) {
    device.expect(mine[i], (i + 1) * kMiB, 0x600u + i, s);
    pool.deallocate(mine[i], s);
  }
  g.end(s);  // REQUIREs success: nothing invalidated the global capture
  for (int i = 0; i < 100; ++i) g.launch(s);
  stop.store(true);
  for (auto& t : threads) t.join();
  device.synchronize(s);
  for (auto& stream : streams) device.synchronize(*stream);
  CHECK(failures.load() == 0);
  CHECK(device.mismatches() == 0);
  g.destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  pool.check_invariants();
}

TEST_CASE("capture: an allocation that fails for memory returns the error and leaves the capture valid",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  PoolOptions options = options_on(device);
  options.max_size = 64 * kMiB;
  Pool pool(options);
  ScopedStream s(device);
  ScopedStream other(device);
  const PoolStats before = pool.stats();
  // A free still pending on another stream: the out-of-memory path would
  // synchronize the device for it, which would invalidate the capture.
  void* pending = pool.allocate(16 * kMiB, other);
  device.busy(other, 200ms);
  pool.deallocate(pending, other);
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = pool.allocate(40 * kMiB, s);
  device.fill(p, 40 * kMiB, 0x0Fu, s);
  void* q = reinterpret_cast<void*>(0x1);
  CHECK(pool.try_allocate(&q, 40 * kMiB, s) == cudaErrorMemoryAllocation);
  CHECK(q == nullptr);
  CHECK(held_by_graphs(pool, 40 * kMiB) == 40 * kMiB);
  device.expect(p, 40 * kMiB, 0x0Fu, s);
  g.end(s);  // still valid
  g.launch(s);
  device.synchronize(s);
  device.synchronize(other);
  CHECK(device.mismatches() == 0);
  g.destroy();
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  // Not freed in the graph: the caller's until freed, graph gone or not.
  CHECK(pool.stats().used_current == before.used_current + 40 * kMiB);
  pool.deallocate(p, s);
  device.synchronize(s);
  CHECK(pool.stats().used_current == before.used_current);
  pool.check_invariants();
}

TEST_CASE("capture: every capture mode is served and none is invalidated", "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                         cudaStreamCaptureModeRelaxed};
  for (cudaStreamCaptureMode mode : modes) {
    INFO("capture mode " << static_cast<int>(mode));
    Graph g(device);
    REQUIRE(device.begin_capture(s, mode) == cudaSuccess);
    // Large enough that the pool must grow during the capture.
    void* p = pool.allocate(96 * kMiB, s);
    device.fill(p, 96 * kMiB, 0x9u, s);
    device.expect(p, 96 * kMiB, 0x9u, s);
    pool.deallocate(p, s);
    g.end(s);
    g.launch(s);
    g.launch(s);
    device.synchronize(s);
    CHECK(device.mismatches() == 0);
  }
  device.synchronize(s);
  CHECK(held_by_graphs(pool, 0) == 0);
  pool.check_invariants();
}

TEST_CASE("capture: a block allocated before the capture cannot be freed in it; the capture stays valid",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* eager = pool.allocate(4096, s);
  Graph g(device);
  REQUIRE(device.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(pool.try_deallocate(eager, s) == cudaErrorStreamCaptureUnsupported);
  device.fill(eager, 4096, 0x1u, s);
  g.end(s);
  g.launch(s);
  device.synchronize(s);
  pool.deallocate(eager, s);  // fine once the capture ended
  pool.check_invariants();
}
