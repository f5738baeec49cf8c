// A pool under graph capture, with the simulation's own controls: the pool's
// driver calls during a global capture, on a driver whose VMM calls are
// "potentially unsafe"; the limit of pools without stream checks; a graph
// that outlives its pool.
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <thread>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("pool graphs: growth during a global capture runs in relaxed mode and leaves it valid", "[graphs][sim]") {
  SimConfig config = small_sim();
  config.relax_vmm_calls = false;  // raw VMM calls: unsafe under a global capture
  SimDriver sim(config);
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = pool.allocate(16 * kMiB, s);  // the pool grows: creates, maps, sets access
  CHECK(sim.counters().physical_creates > 0);
  CHECK(capture_info(sim, s).status == cudaStreamCaptureStatusActive);
  // The thread's mode is back to global afterwards.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  REQUIRE(sim.exchange_capture_mode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  pool.deallocate(p, s);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  CHECK(pool.graph_memory_stats().held_bytes == 0);

  // The same growth from another thread in global mode is what such a driver
  // refuses (the CUDA driver relaxes its VMM calls so that it never does).
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  cudaError_t eager = cudaSuccess;
  std::thread([&] {
    cudaStream_t other = sim.create_stream();
    void* q = nullptr;
    eager = pool.try_allocate(&q, 64 * kMiB, other);  // beyond what the pool holds: must grow
  }).join();
  CHECK(eager != cudaSuccess);
  CHECK(capture_info(sim, s).status == cudaStreamCaptureStatusInvalidated);
  CHECK(sim.end_capture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  pool.check_invariants();
}

TEST_CASE("pool graphs: a pool without stream checks cannot see capture", "[graphs][sim]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.check_streams = false;
  Pool pool(options);
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  void* p = pool.allocate(kMiB, s);  // served as an eager allocation (docs/graphs.md, "Limits")
  CHECK(p != nullptr);
  CHECK(pool.graph_memory_stats().held_blocks == 0);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  pool.deallocate(p, s);
}

TEST_CASE("pool graphs: a graph released after its pool is gone touches nothing", "[graphs][sim]") {
  SimDriver sim(small_sim());
  cudaStream_t s = sim.create_stream();
  cudaGraph_t graph = nullptr;
  {
    Pool pool(options_on(sim));
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    pool.allocate(kMiB, s);
    REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  }
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
}

TEST_CASE("pool graphs: memory of a released graph is reused by eager allocations", "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = pool.allocate(8 * kMiB, s);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  pool.deallocate(p, s);  // after the capture: final for the caller, the memory stays with the graph
  void* meanwhile = pool.allocate(8 * kMiB, other);
  CHECK(meanwhile != p);  // the graph still holds it
  pool.deallocate(meanwhile, other);
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  const std::size_t creates = sim.counters().physical_creates;
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  // The caller's free on `s` goes back as a free on `s` (graph_memory.hpp):
  // another stream reuses it once `s` is known synchronized, without growth.
  (void)pool.stats();  // collects the release (docs/graphs.md, "When memory comes back")
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  void* q1 = pool.allocate(8 * kMiB, other);
  void* q2 = pool.allocate(8 * kMiB, other);
  CHECK((q1 == p || q2 == p));
  CHECK(sim.counters().physical_creates == creates);
  pool.deallocate(q1, other);
  pool.deallocate(q2, other);
  pool.check_invariants();
}

TEST_CASE("pool graphs: a block the graph did not free outlives the graph until its owner frees it",
          "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  const std::size_t used_before = pool.stats().used_current;
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* kept = pool.allocate(4 * kMiB, s);  // a graph output, as a tensor that outlives its graph
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  // The graph is gone, its output is not: never handed out again meanwhile.
  void* eager = pool.allocate(4 * kMiB, other);
  CHECK(eager != kept);
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.stats().used_current >= used_before + 8 * kMiB);
  pool.deallocate(kept, other);  // its owner's free, on any stream: an ordinary free
  pool.deallocate(eager, other);
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  CHECK(pool.stats().used_current == used_before);
  CHECK_THROWS(pool.deallocate(kept, other));  // once
  pool.check_invariants();
}
