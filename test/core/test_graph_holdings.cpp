// Which graph holds what (Pool::graph_memory_snapshot, docs/graphs.md): one
// entry per graph, by capture id, its held and output bytes, a block whose
// free another capture made listed by both graphs, entries gone once their
// graph is released.
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <algorithm>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

unsigned long long capture_id(SimDriver& sim, cudaStream_t s) {
  const unsigned long long id = capture_info(sim, s).id;
  REQUIRE(id != 0);
  return id;
}

const GraphHolding* find(const GraphMemorySnapshot& snapshot, unsigned long long id) {
  const auto it = std::find_if(snapshot.begin(), snapshot.end(), [&](const GraphHolding& h) { return h.capture_id == id; });
  return it == snapshot.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("graph holdings: each graph's bytes, blocks and outputs, by capture id", "[graphs][sim]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s1 = sim.create_stream();
  cudaStream_t s2 = sim.create_stream();
  CHECK(pool.graph_memory_snapshot().empty());

  // Graph A: an output of 1 MiB, and a scratch block of 2 MiB freed in the capture.
  REQUIRE(sim.begin_capture(s1, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  const unsigned long long a = capture_id(sim, s1);
  void* a_out = pool.allocate(1 * kMiB, s1);
  void* a_scratch = pool.allocate(2 * kMiB, s1);
  pool.deallocate(a_scratch, s1);
  {
    const GraphMemorySnapshot mid = pool.graph_memory_snapshot();
    REQUIRE(mid.size() == 1);
    CHECK(mid[0].capture_id == a);
    CHECK(mid[0].capturing);
  }
  cudaGraph_t graph_a = nullptr;
  REQUIRE(sim.end_capture(s1, &graph_a) == cudaSuccess);
  pool.deallocate(pool.allocate(4096, s1), s1);  // the pool sees s1 outside the capture

  // Graph B on s2: an output of 4 MiB, and the caller's free of A's output
  // captured in it: B holds that block too until both graphs are gone.
  REQUIRE(sim.begin_capture(s2, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  const unsigned long long b = capture_id(sim, s2);
  void* b_out = pool.allocate(4 * kMiB, s2);
  pool.deallocate(a_out, s2);
  cudaGraph_t graph_b = nullptr;
  REQUIRE(sim.end_capture(s2, &graph_b) == cudaSuccess);

  GraphMemorySnapshot both = pool.graph_memory_snapshot();
  REQUIRE(both.size() == 2);
  CHECK(both[0].capture_id < both[1].capture_id);  // in order of capture id
  const GraphHolding* ha = find(both, a);
  const GraphHolding* hb = find(both, b);
  REQUIRE(ha != nullptr);
  REQUIRE(hb != nullptr);
  CHECK_FALSE(ha->capturing);
  CHECK(ha->held_bytes == 3 * kMiB);
  CHECK(ha->held_blocks == 2);
  CHECK(ha->output_bytes == 1 * kMiB);  // the scratch block was freed in the capture
  CHECK(ha->output_blocks == 1);
  CHECK(hb->held_bytes == 5 * kMiB);  // its output, and A's output whose free it captured
  CHECK(hb->held_blocks == 2);
  CHECK(hb->output_bytes == 4 * kMiB);
  CHECK(hb->output_blocks == 1);
  // The totals count a block once.
  CHECK(pool.graph_memory_stats().held_bytes == 7 * kMiB);
  CHECK(pool.graph_memory_stats().graphs == 2);

  // A released: its entry goes; the block B's capture freed stays B's.
  REQUIRE(sim.graph_destroy(graph_a) == cudaSuccess);
  const GraphMemorySnapshot after_a = pool.graph_memory_snapshot();
  REQUIRE(after_a.size() == 1);
  CHECK(after_a[0].capture_id == b);
  CHECK(after_a[0].held_bytes == 5 * kMiB);
  CHECK(pool.graph_memory_stats().held_bytes == 5 * kMiB);

  REQUIRE(sim.graph_destroy(graph_b) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  pool.deallocate(b_out, s1);  // B's output stays the caller's after the graph
  REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
  pool.check_invariants();
  sim.destroy_stream(s1);
  sim.destroy_stream(s2);
}
