// Share groups of graph memory through sova::Pool, on the simulation's
// capture model: graphs the program promises never run at once reuse what
// their captures freed (docs/graphs.md, "Graphs that never run at once").
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <set>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// One capture on `stream`: `bytes` allocated and freed in it (scratch),
/// and `outputs` more allocated and not freed (their pointers appended).
cudaGraph_t capture_scratch(SimDriver& sim, Pool& pool, cudaStream_t stream, std::size_t bytes,
                            std::vector<void*>* outputs = nullptr, std::size_t output_count = 0) {
  REQUIRE(sim.begin_capture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* scratch = pool.allocate(bytes, stream);
  sim.launch(stream, [] {});
  for (std::size_t i = 0; i < output_count; ++i) outputs->push_back(pool.allocate(bytes, stream));
  pool.deallocate(scratch, stream);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(stream, &graph) == cudaSuccess);
  return graph;
}

std::uint64_t held(const Pool& pool) { return pool.graph_memory_stats().held_bytes; }

}  // namespace

TEST_CASE("share groups: 16 graphs that never run at once hold one graph's scratch, not 16", "[graphs][share_groups]") {
  SimDriver sim(small_sim(512 * kMiB));
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  std::vector<cudaGraph_t> apart;
  for (int i = 0; i < 16; ++i) apart.push_back(capture_scratch(sim, pool, s, 8 * kMiB));
  CHECK(held(pool) == 16 * 8 * kMiB);  // without the promise each graph keeps its own
  for (cudaGraph_t g : apart) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  CHECK(held(pool) == 0);

  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  std::vector<cudaGraph_t> shared;
  for (int i = 0; i < 16; ++i) {
    REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
    shared.push_back(capture_scratch(sim, pool, s, 8 * kMiB));
  }
  CHECK(held(pool) == 8 * kMiB);
  CHECK(pool.graph_memory_stats().graphs == 16);
  // The group holds its memory until it is destroyed and every member released, in either order.
  for (cudaGraph_t g : shared) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  CHECK(held(pool) == 8 * kMiB);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 0);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("share groups: a group destroyed first gives its memory back with its last member", "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t a = capture_scratch(sim, pool, s, 4 * kMiB);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t b = capture_scratch(sim, pool, s, 4 * kMiB);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 4 * kMiB);
  CHECK(pool.destroy_graph_share_group(group) == cudaErrorInvalidValue);  // destroyed already
  REQUIRE(sim.graph_destroy(a) == cudaSuccess);
  CHECK(held(pool) == 4 * kMiB);  // b still a member
  REQUIRE(sim.graph_destroy(b) == cudaSuccess);
  CHECK(held(pool) == 0);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("share groups: outputs are not shared, and stay the caller's after the group", "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  std::vector<void*> outputs;
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t a = capture_scratch(sim, pool, s, kMiB, &outputs, 1);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t b = capture_scratch(sim, pool, s, kMiB, &outputs, 1);
  // Each graph's output is its own block; the scratch is shared: 3 blocks, not 4.
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0] != outputs[1]);
  CHECK(held(pool) == 3 * kMiB);
  REQUIRE(sim.graph_destroy(a) == cudaSuccess);
  REQUIRE(sim.graph_destroy(b) == cudaSuccess);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 0);
  // The outputs are ordinary blocks of the pool now, the caller's to free, once.
  CHECK(pool.stats().used_current == 2 * kMiB);
  for (void* p : outputs) CHECK(pool.try_deallocate(p, s) == cudaSuccess);
  CHECK(pool.try_deallocate(outputs[0], s) == cudaErrorInvalidValue);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("share groups: a capture joins only when named, once per call", "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  const cudaStream_t other = sim.create_stream();
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t member = capture_scratch(sim, pool, s, kMiB);
  cudaGraph_t after = capture_scratch(sim, pool, s, kMiB);        // not named again: its own memory
  cudaGraph_t elsewhere = capture_scratch(sim, pool, other, kMiB);  // another stream, never named
  CHECK(held(pool) == 3 * kMiB);
  // Named, then cancelled: its own memory too.
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  REQUIRE(pool.capture_into_share_group(s, 0) == cudaSuccess);
  cudaGraph_t cancelled = capture_scratch(sim, pool, s, kMiB);
  CHECK(held(pool) == 4 * kMiB);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t second = capture_scratch(sim, pool, s, kMiB);  // the member's scratch again
  CHECK(held(pool) == 4 * kMiB);
  for (cudaGraph_t g : {member, after, elsewhere, cancelled, second}) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 0);
  sim.destroy_stream(other);
  sim.destroy_stream(s);
}

TEST_CASE("share groups: within one forked capture a member's free is reusable on its own stream only",
          "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t origin = sim.create_stream();
  const cudaStream_t side = sim.create_stream();
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  REQUIRE(pool.capture_into_share_group(origin, group) == cudaSuccess);
  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  EventHandle fork = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);  // side joins the capture
  void* a = pool.allocate(kMiB, origin);                       // the first allocation: on the named stream
  pool.deallocate(a, origin);
  void* on_side = pool.allocate(kMiB, side);  // runs beside origin's nodes: not a
  CHECK(on_side != a);
  void* on_origin = pool.allocate(kMiB, origin);  // after the free in capture order: a
  CHECK(on_origin == a);
  pool.deallocate(on_side, side);
  pool.deallocate(on_origin, origin);
  EventHandle join = nullptr;
  REQUIRE(sim.event_create(&join) == cudaSuccess);
  REQUIRE(sim.event_record(join, side) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  cudaGraph_t first = nullptr;
  REQUIRE(sim.end_capture(origin, &first) == cudaSuccess);
  CHECK(held(pool) == 2 * kMiB);
  // Another member reuses both, whichever stream freed them.
  REQUIRE(pool.capture_into_share_group(side, group) == cudaSuccess);
  REQUIRE(sim.begin_capture(side, cudaStreamCaptureModeGlobal) == cudaSuccess);
  std::set<void*> second_took{pool.allocate(kMiB, side), pool.allocate(kMiB, side)};
  CHECK(second_took == std::set<void*>{a, on_side});
  for (void* p : second_took) pool.deallocate(p, side);
  cudaGraph_t second = nullptr;
  REQUIRE(sim.end_capture(side, &second) == cudaSuccess);
  CHECK(held(pool) == 2 * kMiB);
  REQUIRE(sim.graph_destroy(first) == cudaSuccess);
  REQUIRE(sim.graph_destroy(second) == cudaSuccess);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 0);
  REQUIRE(sim.event_destroy(fork) == cudaSuccess);
  REQUIRE(sim.event_destroy(join) == cudaSuccess);
  sim.destroy_stream(side);
  sim.destroy_stream(origin);
}

TEST_CASE("share groups: bad arguments are refused and change nothing", "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  Pool other_pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  CHECK(pool.create_graph_share_group(nullptr) == cudaErrorInvalidValue);
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  std::uint64_t next = 0;
  REQUIRE(pool.create_graph_share_group(&next) == cudaSuccess);
  CHECK(next != group);
  CHECK(pool.capture_into_share_group(nullptr, group) == cudaErrorInvalidValue);  // the legacy stream cannot capture
  CHECK(pool.capture_into_share_group(cudaStreamLegacy, group) == cudaErrorInvalidValue);
  CHECK(pool.capture_into_share_group(s, next + 100) == cudaErrorInvalidValue);
  CHECK(pool.destroy_graph_share_group(0) == cudaErrorInvalidValue);
  CHECK(other_pool.destroy_graph_share_group(next + 100) == cudaErrorInvalidValue);
  REQUIRE(pool.destroy_graph_share_group(next) == cudaSuccess);
  CHECK(pool.capture_into_share_group(s, next) == cudaErrorInvalidValue);  // destroyed
  // A destroyed group's id is never handed out again.
  std::uint64_t third = 0;
  REQUIRE(pool.create_graph_share_group(&third) == cudaSuccess);
  CHECK((third != next && third != group));
  // What was refused named nothing: this capture joins no group.
  cudaGraph_t g1 = capture_scratch(sim, pool, s, kMiB);
  cudaGraph_t g2 = capture_scratch(sim, pool, s, kMiB);
  CHECK(held(pool) == 2 * kMiB);
  REQUIRE(sim.graph_destroy(g1) == cudaSuccess);
  REQUIRE(sim.graph_destroy(g2) == cudaSuccess);
  CHECK(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(pool.destroy_graph_share_group(third) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("share groups: a small output does not take a large shared scratch", "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  std::vector<cudaGraph_t> graphs;
  std::vector<void*> outputs;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    outputs.push_back(pool.allocate(kMiB, s));  // the output first, then the scratch
    void* scratch = pool.allocate(8 * kMiB, s);
    pool.deallocate(scratch, s);
    cudaGraph_t g = nullptr;
    REQUIRE(sim.end_capture(s, &g) == cudaSuccess);
    graphs.push_back(g);
  }
  CHECK(held(pool) == 8 * kMiB + 4 * kMiB);  // one scratch, four outputs
  for (cudaGraph_t g : graphs) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  for (void* p : outputs) pool.deallocate(p, s);
  CHECK(held(pool) == 0);
  sim.destroy_stream(s);
}

TEST_CASE("share groups: a capture's frees before its first allocation neither join nor spend the name",
          "[graphs][share_groups]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  const cudaStream_t s = sim.create_stream();
  std::vector<void*> outputs;
  cudaGraph_t producer = capture_scratch(sim, pool, s, kMiB, &outputs, 1);  // no group: its own memory
  std::uint64_t group = 0;
  REQUIRE(pool.create_graph_share_group(&group) == cudaSuccess);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  cudaGraph_t first = capture_scratch(sim, pool, s, 4 * kMiB);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  pool.deallocate(outputs[0], s);      // the producer's output, freed first in this capture
  void* scratch = pool.allocate(4 * kMiB, s);  // its first allocation: joins, and reuses the first's scratch
  pool.deallocate(scratch, s);
  cudaGraph_t second = nullptr;
  REQUIRE(sim.end_capture(s, &second) == cudaSuccess);
  CHECK(held(pool) == 2 * kMiB + 4 * kMiB);  // the producer's two blocks, one shared scratch
  // A capture that only frees leaves the name for the next one that allocates.
  std::vector<void*> more;
  cudaGraph_t producer2 = capture_scratch(sim, pool, s, kMiB, &more, 1);
  REQUIRE(pool.capture_into_share_group(s, group) == cudaSuccess);
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  pool.deallocate(more[0], s);
  cudaGraph_t only_frees = nullptr;
  REQUIRE(sim.end_capture(s, &only_frees) == cudaSuccess);
  cudaGraph_t third = capture_scratch(sim, pool, s, 4 * kMiB);  // named still: reuses the shared scratch
  CHECK(held(pool) == 2 * kMiB + 4 * kMiB + 2 * kMiB);
  for (cudaGraph_t g : {producer2, only_frees, third}) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  for (cudaGraph_t g : {producer, first, second}) REQUIRE(sim.graph_destroy(g) == cudaSuccess);
  REQUIRE(pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(held(pool) == 0);
  sim.destroy_stream(s);
}
