// [scenario] Share groups on the GPU (docs/graphs.md, "Graphs that never run
// at once"), the twin of the simulation's test/core/test_scenario_share_groups.cpp:
// 16 graphs captured on one stream into one group, each allocating 128 MiB of
// scratch and a small output, writing the scratch, checking it, writing the
// output, freeing the scratch (the order of the docs' example), each launched
// three times in a fixed random order, one at a time on one stream. The group
// holds about one scratch plus the outputs (at most 1.05 x 128 MiB plus the
// outputs' blocks), the scratch checks pass in every launch, every output
// holds its own graph's bytes after its launch and after all the other
// members' launches, and everything comes back once the group is destroyed
// and the graphs released. Written from the documentation alone. Suite 'gpu'.
#include "gpu/scenario_checks.hpp"
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace sova::scenario;

TEST_CASE("scenario: 16 graphs of 128 MiB scratch in one share group hold one scratch, outputs intact",
          "[gpu][scenario][share_groups]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  constexpr int kGraphs = 16;
  constexpr std::size_t kScratch = 128 * kMiB;
  constexpr std::size_t kOut = 256 * kKiB + 4100;  // small, and not a round size
  Stream s(0);
  // Slots: 0 the scratch checks inside the launches, 1 each output right
  // after its own launch, 2 every output after all the launches, 3 the
  // outputs after the graphs are gone.
  Counters wrong(4);

  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.device = 0;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  std::uint64_t group = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &group) == cudaSuccess);
  CHECK(group == 1);

  std::vector<cudaGraph_t> graphs(kGraphs, nullptr);
  std::vector<cudaGraphExec_t> execs(kGraphs, nullptr);
  std::vector<void*> outs(kGraphs, nullptr);
  auto scratch_tag = [](int i) { return 0x5C000000u + static_cast<std::uint32_t>(i); };
  auto out_tag = [](int i) { return 0x0A000000u + static_cast<std::uint32_t>(i); };
  for (int i = 0; i < kGraphs; ++i) {
    REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, group, s) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* t = nullptr;
    void* o = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&t, kScratch, pool, s) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&o, kOut, pool, s) == cudaSuccess);
    fill(0, t, kScratch, scratch_tag(i), s);
    count_wrong(0, t, kScratch, scratch_tag(i), wrong.slot(0), s);
    fill(0, o, kOut, out_tag(i), s);
    REQUIRE(sovaFreeAsync(t, s) == cudaSuccess);
    REQUIRE(cudaStreamEndCapture(s, &graphs[static_cast<std::size_t>(i)]) == cudaSuccess);
    REQUIRE(graphs[static_cast<std::size_t>(i)] != nullptr);
    REQUIRE(cudaGraphInstantiate(&execs[static_cast<std::size_t>(i)], graphs[static_cast<std::size_t>(i)], 0) ==
            cudaSuccess);
    outs[static_cast<std::size_t>(i)] = o;
  }

  // What the group holds: the per-graph listing gives the outputs' blocks.
  std::size_t count = 0;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
  CHECK(count == static_cast<std::size_t>(kGraphs));
  std::vector<sovaGraphHolding> listing(count);
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, listing.data(), listing.size(), &count) == cudaSuccess);
  std::uint64_t output_bytes = 0;
  for (const sovaGraphHolding& h : listing) {
    CHECK(h.outputBlocks == 1);
    CHECK(h.outputBytes >= kOut);
    output_bytes += h.outputBytes;
  }
  CHECK(output_bytes <= static_cast<std::uint64_t>(kGraphs) * 2 * kMiB);  // small blocks stay small
  const std::uint64_t held = graph_attr(pool, cudaGraphMemAttrUsedMemCurrent);
  INFO("held " << held << " bytes, outputs' blocks " << output_bytes << " bytes; without a group the graphs would "
               << "hold " << static_cast<std::uint64_t>(kGraphs) * kScratch + output_bytes);
  CHECK(held >= kScratch + static_cast<std::uint64_t>(kGraphs) * kOut);
  CHECK(held <= kScratch * 105 / 100 + output_bytes);

  // Launched three times each, in a fixed random order, one at a time on s;
  // each output checked right after its own launch, in stream order.
  std::vector<int> order;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < kGraphs; ++i) order.push_back(i);
  std::mt19937 rng(20261202u);
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) {
    REQUIRE(cudaGraphLaunch(execs[static_cast<std::size_t>(i)], s) == cudaSuccess);
    count_wrong(0, outs[static_cast<std::size_t>(i)], kOut, out_tag(i), wrong.slot(1), s);
  }
  s.sync();
  CHECK(wrong.read(0) == 0);  // the scratch held what each launch wrote, until its free
  CHECK(wrong.read(1) == 0);  // each output what its own launch wrote
  // Every output after all the others' launches.
  for (int i = 0; i < kGraphs; ++i) count_wrong(0, outs[static_cast<std::size_t>(i)], kOut, out_tag(i), wrong.slot(2), s);
  s.sync();
  CHECK(wrong.read(2) == 0);
  CHECK(graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == held);  // launches change nothing

  // The group destroyed, then the graphs: the memory comes back once both
  // are done (the release may come a moment after the destroys: poll).
  REQUIRE(sovaMemPoolShareGroupDestroy(pool, group) == cudaSuccess);
  CHECK(sovaMemPoolShareGroupDestroy(pool, group) == cudaErrorInvalidValue);
  for (int i = 0; i < kGraphs; ++i) {
    REQUIRE(cudaGraphExecDestroy(execs[static_cast<std::size_t>(i)]) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graphs[static_cast<std::size_t>(i)]) == cudaSuccess);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(poll([&] { return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0; }));
  // The outputs are the caller's: still allocated, their bytes intact.
  CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == static_cast<std::uint64_t>(kGraphs) * kOut);
  for (int i = 0; i < kGraphs; ++i) count_wrong(0, outs[static_cast<std::size_t>(i)], kOut, out_tag(i), wrong.slot(3), s);
  s.sync();
  CHECK(wrong.read(3) == 0);
  for (void* o : outs) REQUIRE(sovaFreeAsync(o, s) == cudaSuccess);
  s.sync();
  CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
