// Conformance: a capture forked over several streams (cudaEventRecord on a
// capturing stream, cudaStreamWaitEvent by another, and the same back to join),
// with allocations and frees on the forked streams (docs/graphs.md, "Several
// streams in one capture"). Runs on the simulation's capture model and on a
// GPU's real capture.
//
// Every block gets a tag written and checked by the graph's own kernels at
// every launch. The branches of a graph run at the same time (on a GPU, and
// in the simulation): a block handed to two branches that the graph does not
// order shows up as mismatches; the tests also check the addresses sova hands
// out against its rules.
#include "conformance/graph_fixture.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <set>
#include <thread>
#include <utility>
#include <vector>

using namespace sova;
using namespace sova::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

}  // namespace

TEST_CASE("capture over streams: a block allocated on a forked stream and freed on the origin after the join",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ForkedStreams streams(device, 1);
  const cudaStream_t origin = streams.origin();
  const cudaStream_t side = streams.side(0);
  ScopedStream eager(device);
  const PoolStats before = pool.stats();

  Graph g(device);
  REQUIRE(device.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  streams.fork();
  // The forked stream is part of the origin's capture.
  const CaptureInfo of_origin = capture_of(device, origin);
  const CaptureInfo of_side = capture_of(device, side);
  CHECK(of_side.status == cudaStreamCaptureStatusActive);
  CHECK(of_side.id == of_origin.id);

  void* a = pool.allocate(1 * kMiB, side);
  device.fill(a, 1 * kMiB, 0xA1u, side);
  void* b = pool.allocate(64 * kKiB, origin);  // meanwhile on the origin
  CHECK(b != a);
  device.fill(b, 64 * kKiB, 0xB2u, origin);
  device.expect(a, 1 * kMiB, 0xA1u, side);
  streams.join();
  device.expect(a, 1 * kMiB, 0xA1u, origin);
  pool.deallocate(a, origin);
  void* c = pool.allocate(512 * kKiB, origin);  // after a's free, on the stream of the free: a's block
  CHECK(c == a);
  device.fill(c, 512 * kKiB, 0xC3u, origin);
  device.expect(b, 64 * kKiB, 0xB2u, origin);
  device.expect(c, 512 * kKiB, 0xC3u, origin);
  pool.deallocate(b, origin);
  pool.deallocate(c, origin);
  g.end(origin);
  // The end took the forked stream out of capture too.
  CHECK(capture_of(device, side).status == cudaStreamCaptureStatusNone);
  CHECK(pool.graph_memory_stats().held_blocks == 2);
  CHECK(held_by_graphs(pool, 1 * kMiB + 64 * kKiB) == 1 * kMiB + 64 * kKiB);

  // Eager work meanwhile, on another stream: never gets the graph's memory.
  launch_beside_eager(device, pool, g, origin, eager, 200, 20, a, b);
  device.synchronize(eager);
  destroy_expecting_all_back(device, pool, g, origin);
  CHECK(pool.stats().live_blocks == before.live_blocks);
}

TEST_CASE("capture over streams: a block freed on a forked stream is reused there only, never by a branch beside it",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ForkedStreams streams(device, 1);
  const cudaStream_t origin = streams.origin();
  const cudaStream_t side = streams.side(0);

  Graph g(device);
  REQUIRE(device.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* a = pool.allocate(1 * kMiB, origin);
  device.fill(a, 1 * kMiB, 0xA1u, origin);
  streams.fork();  // side's work follows a's fill
  // From here the two streams are branches the graph does not order.
  void* c = pool.allocate(1 * kMiB, origin);
  device.fill(c, 1 * kMiB, 0xC3u, origin);
  device.expect(a, 1 * kMiB, 0xA1u, side);
  pool.deallocate(a, side);
  void* b = pool.allocate(1 * kMiB, side);  // after a's free, on the stream of the free: a's block
  CHECK(b == a);
  device.fill(b, 1 * kMiB, 0xB2u, side);
  // After a's free in capture order, but on the other branch: new memory.
  void* d = pool.allocate(1 * kMiB, origin);
  CHECK(d != a);
  device.fill(d, 1 * kMiB, 0xD4u, origin);
  device.busy(side, 200us);  // b's writer and reader apart: an overlap with d would show
  device.expect(b, 1 * kMiB, 0xB2u, side);
  device.expect(c, 1 * kMiB, 0xC3u, origin);
  device.expect(d, 1 * kMiB, 0xD4u, origin);
  // The blocks live at once on the two branches are distinct.
  const std::set<void*> live{b, c, d};
  CHECK(live.size() == 3);
  streams.join();
  device.expect(b, 1 * kMiB, 0xB2u, origin);
  pool.deallocate(b, origin);
  pool.deallocate(c, origin);
  pool.deallocate(d, origin);
  g.end(origin);
  CHECK(pool.graph_memory_stats().held_blocks == 3);
  CHECK(held_by_graphs(pool, 3 * kMiB) == 3 * kMiB);

  for (int i = 0; i < 200; ++i) g.launch(origin);
  destroy_expecting_all_back(device, pool, g, origin);
}

TEST_CASE("capture over streams: two forked streams allocate at once from two threads; no block is shared",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ForkedStreams streams(device, 2);
  const cudaStream_t origin = streams.origin();

  struct Block {
    void* ptr;
    std::size_t bytes;
    std::uint32_t tag;
  };
  // Per branch: every block it was handed, and those still live at its end.
  std::vector<Block> handed[2];
  std::vector<Block> live[2];

  Graph g(device);
  // Thread-local: the two threads' own calls are not restricted by it.
  REQUIRE(device.begin_capture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  // The capture's first allocation, before the threads: it ties sova to the
  // graph (a user object), which is not done while other threads capture
  // into it.
  void* first = pool.allocate(256 * kKiB, origin);
  device.fill(first, 256 * kKiB, 0x7F00u, origin);
  streams.fork();
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const cudaStream_t stream = streams.side(t);
      std::deque<Block> mine;
      for (int i = 0; i < 24; ++i) {
        const std::size_t bytes = (1 + (i * 3 + t) % 4) * 256 * kKiB;
        const std::uint32_t tag = 0x7000u + 0x100u * t + i;
        void* p = nullptr;
        if (pool.try_allocate(&p, bytes, stream) != cudaSuccess) return;  // seen below: too few blocks
        device.fill(p, bytes, tag, stream);
        mine.push_back(Block{p, bytes, tag});
        handed[t].push_back(mine.back());
        if (i % 3 == 2) {
          // Frees on the branch: its later allocations may reuse them.
          const Block oldest = mine.front();
          mine.pop_front();
          device.expect(oldest.ptr, oldest.bytes, oldest.tag, stream);
          pool.deallocate(oldest.ptr, stream);
        }
      }
      live[t].assign(mine.begin(), mine.end());
    });
  }
  for (auto& thread : threads) thread.join();
  REQUIRE(handed[0].size() == 24);
  REQUIRE(handed[1].size() == 24);
  streams.join();
  for (const auto& blocks : live) {
    for (const Block& b : blocks) {
      device.expect(b.ptr, b.bytes, b.tag, origin);
      pool.deallocate(b.ptr, origin);
    }
  }
  device.expect(first, 256 * kKiB, 0x7F00u, origin);
  pool.deallocate(first, origin);
  g.end(origin);

  // No block of one branch ever went to the other: nothing orders them.
  std::set<void*> of0;
  for (const Block& b : handed[0]) of0.insert(b.ptr);
  for (const Block& b : handed[1]) CHECK(of0.count(b.ptr) == 0);
  for (const auto& blocks : handed) {
    for (const Block& b : blocks) CHECK(b.ptr != first);  // live on the origin all along
  }
  // Blocks live at the same time on one branch are distinct.
  for (const auto& blocks : live) {
    std::set<void*> distinct;
    for (const Block& b : blocks) distinct.insert(b.ptr);
    CHECK(distinct.size() == blocks.size());
  }
  // Frees on a branch were reused by its later allocations: the graph holds
  // fewer blocks than were handed out.
  CHECK(pool.graph_memory_stats().held_blocks < 1 + handed[0].size() + handed[1].size());

  for (int i = 0; i < 50; ++i) g.launch(origin);
  destroy_expecting_all_back(device, pool, g, origin);
}

TEST_CASE("capture over streams: a destroyed graph gives back every block of every branch",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ForkedStreams streams(device, 2);
  const cudaStream_t origin = streams.origin();
  const cudaStream_t side0 = streams.side(0);
  const cudaStream_t side1 = streams.side(1);
  const PoolStats before = pool.stats();

  Graph g(device);
  REQUIRE(device.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  streams.fork();
  // The capture's first allocation is on a forked stream.
  void* freed = pool.allocate(2 * kMiB, side0);
  device.fill(freed, 2 * kMiB, 0x21u, side0);
  device.expect(freed, 2 * kMiB, 0x21u, side0);
  pool.deallocate(freed, side0);
  void* kept0 = pool.allocate(3 * kMiB, side0);  // left live by the graph
  device.fill(kept0, 3 * kMiB, 0x30u, side0);
  void* kept1 = pool.allocate(5 * kMiB, side1);
  device.fill(kept1, 5 * kMiB, 0x51u, side1);
  void* on_origin = pool.allocate(1 * kMiB, origin);
  device.fill(on_origin, 1 * kMiB, 0x10u, origin);
  streams.join();
  device.expect(on_origin, 1 * kMiB, 0x10u, origin);
  pool.deallocate(on_origin, origin);
  g.end(origin);
  CHECK(capture_of(device, side0).status == cudaStreamCaptureStatusNone);
  CHECK(capture_of(device, side1).status == cudaStreamCaptureStatusNone);
  const std::uint64_t held = 2 * kMiB + 3 * kMiB + 5 * kMiB + 1 * kMiB;
  CHECK(held_by_graphs(pool, held) == held);
  CHECK(pool.stats().used_current > before.used_current);

  cudaGraphExec_t second = nullptr;
  REQUIRE(device.instantiate(&second, g.graph) == cudaSuccess);
  g.launch(origin);
  device.synchronize(origin);
  REQUIRE(device.launch_graph(second, side1) == cudaSuccess);  // a forked stream works eagerly again
  device.expect(kept1, 5 * kMiB, 0x51u, side1);
  device.synchronize(side1);
  g.launch(origin);
  device.expect(kept0, 3 * kMiB, 0x30u, origin);
  device.synchronize(origin);
  // The blocks left live: freed by the caller, kept by the graph.
  pool.deallocate(kept0, side0);
  pool.deallocate(kept1, origin);
  void* eager = pool.allocate(1 * kMiB, side0);  // eager allocation on a stream the capture forked
  device.fill(eager, 1 * kMiB, 0xEEu, side0);
  device.expect(eager, 1 * kMiB, 0xEEu, side0);
  pool.deallocate(eager, side0);
  device.synchronize(side0);
  CHECK(held_by_graphs(pool, held) == held);

  g.destroy();
  CHECK(held_by_graphs(pool, held) == held);  // the second executable still holds them
  REQUIRE(device.destroy_graph_exec(second) == cudaSuccess);
  device.synchronize(origin);
  CHECK(held_by_graphs(pool, 0) == 0);
  const GraphMemoryStats stats = pool.graph_memory_stats();
  CHECK(stats.graphs == 0);
  CHECK(stats.released_graphs == 1);
  CHECK(pool.stats().used_current == before.used_current);
  CHECK(pool.stats().live_blocks == before.live_blocks);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
}

TEST_CASE("capture over streams: a forked stream not joined back fails the capture; its blocks come back when freed",
          "[conformance][graphs]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  // Streams of the test's own, not ScopedStream: should one stay in capture
  // after the failed end (it must not), the test reports it rather than
  // synchronize a capturing stream at scope exit.
  const cudaStream_t origin = device.create_stream();
  const cudaStream_t side = device.create_stream();
  ScopedEvent fork(device);
  const PoolStats before = pool.stats();

  // Relaxed: were the capture left open, it would restrict no other call.
  REQUIRE(device.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* a = pool.allocate(1 * kMiB, origin);
  device.fill(a, 1 * kMiB, 0xA1u, origin);
  follow(device, side, origin, fork);
  void* b = pool.allocate(2 * kMiB, side);
  device.fill(b, 2 * kMiB, 0xB2u, side);  // never waited on by the origin
  cudaGraph_t graph = nullptr;
  CHECK(device.end_capture(origin, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr);
  if (graph != nullptr) device.destroy_graph(graph);
  const bool origin_out = capture_of(device, origin).status == cudaStreamCaptureStatusNone;
  const bool side_out = capture_of(device, side).status == cudaStreamCaptureStatusNone;
  CHECK(origin_out);
  CHECK(side_out);
  if (!origin_out || !side_out) return;  // the streams are left as they are

  // The failed capture's graph is gone; what it handed out is the caller's
  // until freed, as after any capture (docs/graphs.md), and comes back then.
  CHECK(held_by_graphs(pool, 0) == 0);
  CHECK(pool.graph_memory_stats().graphs == 0);
  CHECK(pool.try_deallocate(a, origin) == cudaSuccess);
  CHECK(pool.try_deallocate(b, side) == cudaSuccess);
  CHECK(pool.try_deallocate(a, origin) == cudaErrorInvalidValue);  // once
  device.synchronize(side);
  device.synchronize(origin);
  CHECK(pool.stats().used_current == before.used_current);
  // Both streams serve eager work again.
  void* p = pool.allocate(1 * kMiB, side);
  device.fill(p, 1 * kMiB, 0x5u, side);
  pool.deallocate(p, side);
  device.synchronize(side);
  device.synchronize(origin);
  pool.check_invariants();
  device.destroy_stream(side);
  device.destroy_stream(origin);
}
