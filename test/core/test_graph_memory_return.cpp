// A released graph's memory comes back on every path of the pool
// (docs/graphs.md, "When memory comes back"): an allocation on any stream
// (the legacy one included), a free, a statistics read, a trim, and the
// out-of-memory path when the release comes during its synchronize. On a
// 64 MiB device a graph holds 40 MiB, so another 40 MiB fit only once that
// memory is back.
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <chrono>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// Captures on `s` an allocation of `bytes` freed in the graph, and returns
/// the graph (its memory is the graph's until it is released); the block in
/// `*block` if asked.
cudaGraph_t capture_alloc_free(SimDriver& sim, Pool& pool, cudaStream_t s, std::size_t bytes, void** block = nullptr) {
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = pool.allocate(bytes, s);
  if (block != nullptr) *block = p;
  sim.launch(s, [] {});
  pool.deallocate(p, s);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  return graph;
}

}  // namespace

TEST_CASE("graph memory return: a destroyed graph's memory comes back on every path of the pool", "[graphs][sim]") {
  SimDriver sim(small_sim(64 * kMiB));
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  void* block = nullptr;
  cudaGraph_t graph = capture_alloc_free(sim, pool, s, 40 * kMiB, &block);
  void* eager = pool.allocate(kMiB, s);  // the capture is seen over
  REQUIRE(pool.graph_memory_stats().held_bytes == 40 * kMiB);  // collects nothing: nothing released yet
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);           // released: the callback ran

  SECTION("an allocation on the legacy stream") {
    void* q = nullptr;
    CHECK(pool.try_allocate(&q, 40 * kMiB, nullptr) == cudaSuccess);
    if (q != nullptr) pool.deallocate(q, nullptr);
    pool.deallocate(eager, s);
  }
  SECTION("a statistics read") {
    CHECK(pool.stats().used_current == kMiB);
    pool.deallocate(eager, s);
  }
  SECTION("an attribute read") {
    std::uint64_t used = ~std::uint64_t{0};
    REQUIRE(pool.get_attribute(cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess);
    CHECK(used == kMiB);
    pool.deallocate(eager, s);
  }
  SECTION("a trim") {
    pool.deallocate(eager, s);
    pool.trim_to(0);
    CHECK(sim.counters().physical_bytes == 0);
    CHECK(reserved_of(pool) == 0);
  }
  SECTION("a free") {
    // block_size collects nothing: it says whether the graph's block is
    // still live in the pool, which it is until the release is collected.
    REQUIRE(pool.block_size(block) == 40 * kMiB);
    pool.deallocate(eager, s);
    CHECK(pool.block_size(block) == 0);
  }
  pool.check_invariants();
}

TEST_CASE("graph memory return: a release during the out-of-memory synchronize is collected before failing",
          "[graphs][sim]") {
  SimDriver sim(small_sim(64 * kMiB));
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  cudaGraph_t graph = capture_alloc_free(sim, pool, s, 40 * kMiB);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  // A launch still running when the graph is destroyed: the release comes
  // when it completes, which the out-of-memory path's synchronize waits for.
  sim.delay(s, std::chrono::milliseconds(100));
  REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  // A free no fence covers on s, so that the out-of-memory path synchronizes
  // (and s is seen outside capture, so that it may).
  void* small = pool.allocate(kMiB, s);
  pool.deallocate(small, s);
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(pool.graph_memory_stats().held_bytes == 40 * kMiB);  // still launching: not released

  void* q = nullptr;
  CHECK(pool.try_allocate(&q, 40 * kMiB, other) == cudaSuccess);
  if (q != nullptr) pool.deallocate(q, other);
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  pool.check_invariants();
}
