// The caller's free of a graph's output (a block the graph allocated and did
// not free) is ordered after the work before it on its stream, as every free
// is (sova/pool.hpp): whether the graph is released after the free or before
// it, another stream gets the block only once that work is done. Under
// another capture, the free is a node of that graph, which then holds the
// block too; once the allocating graph is released, the block is an
// ordinary one, and a free under capture is refused (docs/graphs.md).
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBytes = 8 * kMiB;

/// A graph captured on `s` whose one allocation (`*out`) is not freed in it,
/// and whose one node fills it with `fill`.
cudaGraph_t capture_output(SimDriver& sim, Pool& pool, cudaStream_t s, void** out, unsigned char fill) {
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = pool.allocate(kBytes, s);
  sim.launch(s, [p, fill] { std::memset(p, fill, kBytes); });
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  *out = p;
  return graph;
}

}  // namespace

TEST_CASE("graph output free: another stream never overwrites the output under the freeing stream's read",
          "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t reader = sim.create_stream();
  cudaStream_t writer = sim.create_stream();
  void* out = nullptr;
  cudaGraph_t graph = capture_output(sim, pool, s, &out, 0xAB);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);

  // A kernel on `reader` that reads the output once the gate opens.
  std::atomic<bool> gate{false};
  std::atomic<int> mismatches{0};
  sim.launch(reader, [&gate, &mismatches, out] {
    while (!gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto* bytes = static_cast<const unsigned char*>(out);
    for (std::size_t i = 0; i < kBytes; i += 4096) {
      if (bytes[i] != 0xAB) mismatches.fetch_add(1);
    }
  });
  auto release_graph = [&] {
    REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
    REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  };
  SECTION("the graph released after the free") {
    REQUIRE(pool.try_deallocate(out, reader) == cudaSuccess);  // behind the read
    release_graph();
  }
  SECTION("the graph released before the free, the release not yet collected") {
    release_graph();
    REQUIRE(pool.try_deallocate(out, reader) == cudaSuccess);  // behind the read
  }
  // Another stream's allocation of the same size, overwritten at once: it
  // may be `out` only if `writer` waits for `reader`'s read.
  void* q = pool.allocate(kBytes, writer);
  sim.launch(writer, [q] { std::memset(q, 0xEE, kBytes); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // an unordered write lands meanwhile
  gate.store(true);
  REQUIRE(sim.stream_synchronize(reader) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(writer) == cudaSuccess);
  CHECK(mismatches.load() == 0);
  pool.deallocate(q, writer);
  pool.check_invariants();
}

TEST_CASE("graph output free: once its graph is released, a free under capture is refused and changes nothing",
          "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  void* out = nullptr;
  cudaGraph_t graph = capture_output(sim, pool, s, &out, 0xAB);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);  // released, not yet collected

  REQUIRE(sim.begin_capture(other, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(pool.try_deallocate(out, other) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t other_graph = nullptr;
  REQUIRE(sim.end_capture(other, &other_graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(other_graph) == cudaSuccess);

  CHECK(pool.block_size(out) == kBytes);  // still the caller's
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.try_deallocate(out, s) == cudaSuccess);
  CHECK(pool.try_deallocate(out, s) == cudaErrorInvalidValue);
  pool.check_invariants();
}

TEST_CASE("graph output free: a free captured in another graph keeps the block until that graph is released too",
          "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t t = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  void* out = nullptr;
  cudaGraph_t producer = capture_output(sim, pool, s, &out, 0xAB);

  // The consumer reads the output, then frees it: each launch uses it.
  std::atomic<int> mismatches{0};
  REQUIRE(sim.begin_capture(t, cudaStreamCaptureModeGlobal) == cudaSuccess);
  sim.launch(t, [&mismatches, out] {
    if (*static_cast<const unsigned char*>(out) != 0xAB) mismatches.fetch_add(1);
  });
  REQUIRE(pool.try_deallocate(out, t) == cudaSuccess);
  cudaGraph_t consumer = nullptr;
  REQUIRE(sim.end_capture(t, &consumer) == cudaSuccess);
  cudaGraphExec_t producer_exec = nullptr;
  cudaGraphExec_t consumer_exec = nullptr;
  REQUIRE(sim.graph_instantiate(&producer_exec, producer) == cudaSuccess);
  REQUIRE(sim.graph_instantiate(&consumer_exec, consumer) == cudaSuccess);
  REQUIRE(sim.graph_launch(producer_exec, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  REQUIRE(sim.graph_exec_destroy(producer_exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(producer) == cudaSuccess);

  // The producer is gone; the consumer still reads the block at each launch.
  void* q = pool.allocate(kBytes, other);
  CHECK(q != out);
  sim.launch(other, [q] { std::memset(q, 0xEE, kBytes); });
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  CHECK(pool.graph_memory_stats().held_bytes == kBytes);
  REQUIRE(sim.graph_launch(consumer_exec, t) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(t) == cudaSuccess);
  CHECK(mismatches.load() == 0);

  REQUIRE(sim.graph_exec_destroy(consumer_exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(consumer) == cudaSuccess);
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.graph_memory_stats().graphs == 0);
  CHECK(pool.block_size(out) == 0);  // free: back in the pool
  pool.deallocate(q, other);
  pool.check_invariants();
}

TEST_CASE("graph output free: a release collected while the freeing stream captures leaves that capture valid",
          "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t user = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  void* out = nullptr;
  cudaGraph_t graph = capture_output(sim, pool, s, &out, 0xAB);
  REQUIRE(pool.try_deallocate(out, user) == cudaSuccess);  // the caller's free, on `user`
  REQUIRE(sim.begin_capture(user, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  // Collected here: `out` goes back as a free on `user`, which captures now.
  void* q = pool.allocate(kBytes, other);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(user, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusActive);
  cudaGraph_t user_graph = nullptr;
  CHECK(sim.end_capture(user, &user_graph) == cudaSuccess);
  if (user_graph != nullptr) REQUIRE(sim.graph_destroy(user_graph) == cudaSuccess);
  pool.deallocate(q, other);
  pool.check_invariants();
}
