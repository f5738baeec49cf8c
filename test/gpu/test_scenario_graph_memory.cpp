// [scenario] Graph memory comes back (docs/graphs.md, "When memory comes back"):
// alloc/free captured on one stream, the graph and its executable destroyed,
// the device synchronized, then each call the docs name as one that gives the
// graph's blocks back (an allocation on the legacy stream, one under capture,
// a free, the statistics, the attributes, the trims) finds the memory back:
// within the pool's maxSize, UsedMemCurrent back, ReservedMemCurrent 0 after a
// trim. And a graph's output freed by the caller on s1 while a kernel on s1
// still reads it: s2's allocations never get memory s1 still reads (checked
// with byte patterns). Written from the documentation alone. Suite 'gpu'.
#include "gpu/scenario_checks.hpp"
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace sova::scenario;

namespace {

sovaMemPool_t make_pool(std::size_t max_size, std::uint64_t threshold) {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.maxSize = max_size;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
  return pool;
}

bool overlaps(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + bn && y < x + an;
}

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  void end(cudaStream_t s) {
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    REQUIRE(graph != nullptr);
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  }
  void destroy() {
    if (exec != nullptr) REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    if (graph != nullptr) REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    exec = nullptr;
    graph = nullptr;
  }
};

}  // namespace

TEST_CASE("scenario: a destroyed graph's memory is back on the next call of each documented kind",
          "[scenario][graphs]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  constexpr std::size_t kA = 48 * kMiB, kB = 40 * kMiB + 777, kLimit = 64 * kMiB;
  Stream s(0), s2(0);
  Counters wrong(2);
  sovaMemPool_t pool = make_pool(kLimit, 0);

  // Captured: allocate, write, check, free, twice; the second block reuses the
  // first's memory (a free is reusable by later allocations of the capture on
  // its stream), so the graph holds its peak, not its sum.
  Graph g;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&a, kA, pool, s) == cudaSuccess);
  fill(0, a, kA, 0xA1, s);
  count_wrong(0, a, kA, 0xA1, wrong.slot(0), s);
  REQUIRE(sovaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&b, kB, pool, s) == cudaSuccess);
  fill(0, b, kB, 0xB2, s);
  count_wrong(0, b, kB, 0xB2, wrong.slot(0), s);
  REQUIRE(sovaFreeAsync(b, s) == cudaSuccess);
  g.end(s);
  for (int i = 0; i < 20; ++i) REQUIRE(cudaGraphLaunch(g.exec, s) == cudaSuccess);
  s.sync();
  CHECK(wrong.read(0) == 0);
  const std::uint64_t held = graph_attr(pool, cudaGraphMemAttrUsedMemCurrent);
  CHECK(held >= kA);
  CHECK(held < kA + kB);  // the peak, not the sum
  CHECK(graph_attr(pool, cudaGraphMemAttrUsedMemHigh) >= held);

  // While the graph lives, eager work never receives its memory: within the
  // 64 MiB limit another 48 MiB cannot be had.
  void* p = reinterpret_cast<void*>(std::uintptr_t{1});
  CHECK(sovaMallocFromPoolAsync(&p, kA, pool, 0) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);

  g.destroy();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

  auto back = [&] { return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0; };

  SECTION("an allocation on the legacy stream") {
    void* q = nullptr;
    // The callback may come a moment after the synchronize (docs: poll).
    CHECK(poll([&] { return sovaMallocFromPoolAsync(&q, kA, pool, 0) == cudaSuccess; }));
    REQUIRE(q != nullptr);
    fill(0, q, kA, 0xC3, 0);
    count_wrong(0, q, kA, 0xC3, wrong.slot(1), 0);
    REQUIRE(sovaFreeAsync(q, 0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(wrong.read(1) == 0);
  }
  SECTION("an allocation on another stream under capture (a failed one leaves the capture valid: retried)") {
    Graph g2;
    REQUIRE(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    void* q = nullptr;
    CHECK(poll([&] {
      const cudaError_t e = sovaMallocFromPoolAsync(&q, kA, pool, s2);
      REQUIRE((e == cudaSuccess || e == cudaErrorMemoryAllocation));
      return e == cudaSuccess;
    }));
    REQUIRE(q != nullptr);
    fill(0, q, kA, 0xC4, s2);
    count_wrong(0, q, kA, 0xC4, wrong.slot(1), s2);
    REQUIRE(sovaFreeAsync(q, s2) == cudaSuccess);
    g2.end(s2);
    REQUIRE(cudaGraphLaunch(g2.exec, s2) == cudaSuccess);
    s2.sync();
    CHECK(wrong.read(1) == 0);
    g2.destroy();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  SECTION("a free of an eager block") {
    void* e = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&e, 4096, pool, s2) == cudaSuccess);
    REQUIRE(sovaFreeAsync(e, s2) == cudaSuccess);
    CHECK(poll(back));
  }
  SECTION("sovaMemPoolGetAttribute(UsedMemCurrent)") {
    CHECK(poll([&] { return attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0 && back(); }));
  }
  SECTION("sovaMemPoolGetStats") {
    CHECK(poll([&] {
      const sovaMemPoolStats st = stats(pool);
      return st.usedCurrent == 0 && st.liveBlocks == 0;
    }));
  }
  SECTION("sovaMemPoolGetGraphMemAttribute") { CHECK(poll(back)); }
  SECTION("sovaMemPoolTrimTo(0): everything released") {
    CHECK(poll([&] {
      REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
      return attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0;
    }));
  }
  SECTION("sovaMemPoolGraphMemTrim: released above the threshold (0)") {
    CHECK(poll([&] {
      REQUIRE(sovaMemPoolGraphMemTrim(pool) == cudaSuccess);
      return attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0;
    }));
  }
  // Whichever call saw it: all of it back, and a trim releases every byte.
  CHECK(poll(back));
  CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  CHECK(graph_attr(pool, cudaGraphMemAttrReservedMemCurrent) == 0);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  const sovaMemPoolStats st = stats(pool);
  CHECK(st.liveBlocks == 0);
  CHECK(st.usedCurrent == 0);
  // The whole limit is usable again.
  void* whole = nullptr;
  CHECK(sovaMallocFromPoolAsync(&whole, kLimit, pool, s) == cudaSuccess);
  CHECK(sovaFreeAsync(whole, s) == cudaSuccess);
  s.sync();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("scenario: the device's graph memory (default pool, sovaMallocAsync) comes back after the graph goes",
          "[scenario][graphs]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0);
  Counters wrong(1);
  sovaMemPool_t dflt = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&dflt, 0) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(sovaDeviceGraphMemTrim(0) == cudaSuccess);
  std::uint64_t base = 0, used_base = attr(dflt, cudaMemPoolAttrUsedMemCurrent);
  REQUIRE(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &base) == cudaSuccess);

  std::vector<Graph> graphs(4);
  std::vector<void*> outputs;
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    REQUIRE(cudaStreamBeginCapture(s, i % 2 ? cudaStreamCaptureModeRelaxed : cudaStreamCaptureModeGlobal) ==
            cudaSuccess);
    void* t = nullptr;
    void* out = nullptr;
    const std::size_t n = (i + 1) * 7 * kMiB + 13;
    REQUIRE(sovaMallocAsync(&t, n, s) == cudaSuccess);
    REQUIRE(sovaMallocAsync(&out, 4097, s) == cudaSuccess);
    const auto tag = static_cast<std::uint32_t>(i);
    fill(0, t, n, 100 + tag, s);
    count_wrong(0, t, n, 100 + tag, wrong.slot(0), s);
    fill(0, out, 4097, 200 + tag, s);
    REQUIRE(sovaFreeAsync(t, s) == cudaSuccess);
    graphs[i].end(s);
    outputs.push_back(out);
  }
  for (int round = 0; round < 10; ++round)
    for (Graph& g : graphs) REQUIRE(cudaGraphLaunch(g.exec, s) == cudaSuccess);
  s.sync();
  CHECK(wrong.read(0) == 0);
  for (std::size_t i = 0; i < outputs.size(); ++i) count_wrong(0, outputs[i], 4097, 200 + static_cast<std::uint32_t>(i), wrong.slot(0), s);
  s.sync();
  CHECK(wrong.read(0) == 0);
  std::uint64_t held = 0;
  REQUIRE(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &held) == cudaSuccess);
  CHECK(held > base);
  // Destroyed out of order; the outputs freed by the caller, some before, some after.
  REQUIRE(sovaFreeAsync(outputs[1], s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(outputs[2], 0) == cudaSuccess);
  CHECK(sovaFreeAsync(outputs[2], s) == cudaErrorInvalidValue);  // once, final
  for (std::size_t i : {2u, 0u, 3u, 1u}) graphs[i].destroy();
  REQUIRE(sovaFreeAsync(outputs[0], s) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  // outputs[3]: "A block the graph allocated and nobody freed stays the
  // caller's": still live, its bytes intact, after the graph is gone.
  CHECK(poll([&] {
    std::uint64_t v = ~0ull;
    REQUIRE(sovaDeviceGraphMemTrim(0) == cudaSuccess);
    REQUIRE(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v) == cudaSuccess);
    return v == base;
  }));
  CHECK(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == used_base + 4097);
  count_wrong(0, outputs[3], 4097, 203, wrong.slot(0), s);
  s.sync();
  CHECK(wrong.read(0) == 0);
  REQUIRE(sovaFreeAsync(outputs[3], s) == cudaSuccess);
  CHECK(sovaFreeAsync(outputs[3], s) == cudaErrorInvalidValue);
  CHECK(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == used_base);
  s.sync();
}

TEST_CASE("scenario: a graph's output freed on s1 while s1 still reads it; s2 allocates at once",
          "[scenario][graphs]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  constexpr std::size_t kOut = 64 * kMiB + 4100;
  constexpr std::uint32_t kTagA = 0xA0A0, kTagB = 0xB0B0;
  Stream sc(0), s1(0), s2(0);
  Counters wrong(4);  // 0: s1's read of the output, 1: s2's own blocks, 2: in-graph checks
  bool limited = false;
  bool destroy_first = false;
  bool keep_graph = false;
  SECTION("freed, then the graph destroyed") {}
  SECTION("the graph destroyed, then freed") { destroy_first = true; }
  SECTION("freed while the graph lives, relaunched after the free") { keep_graph = true; }
  SECTION("a pool limited to the output's size: s2's allocation must wait for s1, not fail") {
    limited = true;
  }
  CAPTURE(limited, destroy_first, keep_graph);
  // Limited: room for the output and 2 MiB of small blocks only.
  sovaMemPool_t pool = make_pool(limited ? kOut + 4 * kMiB : 0, UINT64_MAX);

  Graph g;
  REQUIRE(cudaStreamBeginCapture(sc, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* out = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&out, kOut, pool, sc) == cudaSuccess);
  fill(0, out, kOut, kTagA, sc);
  count_wrong(0, out, kOut, kTagA, wrong.slot(2), sc);
  g.end(sc);
  REQUIRE(cudaGraphLaunch(g.exec, sc) == cudaSuccess);
  sc.sync();
  // The capture's stream used with the pool again outside the capture: the
  // capture is known over (docs/graphs.md, "Device synchronizes wait").
  void* mark = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&mark, 512, pool, sc) == cudaSuccess);
  REQUIRE(sovaFreeAsync(mark, sc) == cudaSuccess);
  sc.sync();

  if (destroy_first) {
    g.destroy();
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(poll([&] { return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0; }));
  }
  // s1: a long kernel, then a read of the whole output, then the free.
  busy(0, s1, 600000);
  count_wrong(0, out, kOut, kTagA, wrong.slot(0), s1);
  REQUIRE(sovaFreeAsync(out, s1) == cudaSuccess);
  CHECK(sovaFreeAsync(out, s2) == cudaErrorInvalidValue);
  if (!destroy_first && !keep_graph) {
    g.destroy();
    REQUIRE(poll([&] { return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0; }));
  }
  if (keep_graph) {
    // Relaunching after the caller's free is always safe (the memory stays with the graph).
    for (int i = 0; i < 5; ++i) REQUIRE(cudaGraphLaunch(g.exec, sc) == cudaSuccess);
  }
  // s2 allocates at once, and writes what it got.
  std::vector<std::pair<void*, std::size_t>> got;
  const std::vector<std::size_t> sizes =
      limited ? std::vector<std::size_t>{kOut} : std::vector<std::size_t>{kOut, 64 * kMiB, 32 * kMiB, kMiB, 4100};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    void* p = nullptr;
    CAPTURE(sizes[i]);
    REQUIRE(sovaMallocFromPoolAsync(&p, sizes[i], pool, s2) == cudaSuccess);
    fill(0, p, sizes[i], kTagB + static_cast<std::uint32_t>(i), s2);
    got.emplace_back(p, sizes[i]);
    if (keep_graph) CHECK_FALSE(overlaps(p, sizes[i], out, kOut));  // the graph still holds it
  }
  if (!limited) {
    // (Limited, the allocation may wait on the host: the out-of-memory path
    // synchronizes the device, which is allowed.)
    const cudaError_t s1_state = cudaStreamQuery(s1);
    INFO("the race is real only while s1 still runs its kernel");
    CHECK(s1_state == cudaErrorNotReady);
  }
  for (std::size_t i = 0; i < got.size(); ++i)
    count_wrong(0, got[i].first, got[i].second, kTagB + static_cast<std::uint32_t>(i), wrong.slot(1), s2);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(wrong.read(0) == 0);  // s1 read the graph's bytes, not s2's
  CHECK(wrong.read(1) == 0);  // s2's bytes were not overwritten (the relaunches write the graph's memory only)
  CHECK(wrong.read(2) == 0);
  for (auto& [p, n] : got) REQUIRE(sovaFreeAsync(p, s2) == cudaSuccess);
  g.destroy();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(poll([&] {
    return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0 && attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0;
  }));
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(attr(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("scenario: a graph's output freed under another capture once the graph is released is refused",
          "[scenario][graphs]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream sc(0), s2(0);
  Counters wrong(1);
  sovaMemPool_t pool = make_pool(0, UINT64_MAX);
  Graph g;
  REQUIRE(cudaStreamBeginCapture(sc, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* out = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&out, 5 * kMiB, pool, sc) == cudaSuccess);
  fill(0, out, 5 * kMiB, 0x07u, sc);
  g.end(sc);
  REQUIRE(cudaGraphLaunch(g.exec, sc) == cudaSuccess);
  sc.sync();
  g.destroy();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(poll([&] { return graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0; }));
  const Figures before = figures(pool);
  REQUIRE(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(sovaFreeAsync(out, s2) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t empty = nullptr;
  REQUIRE(cudaStreamEndCapture(s2, &empty) == cudaSuccess);  // the capture stayed valid
  if (empty != nullptr) REQUIRE(cudaGraphDestroy(empty) == cudaSuccess);
  CHECK(figures(pool) == before);
  count_wrong(0, out, 5 * kMiB, 0x07u, wrong.slot(0), s2);
  REQUIRE(sovaFreeAsync(out, s2) == cudaSuccess);
  s2.sync();
  CHECK(wrong.read(0) == 0);
  CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
