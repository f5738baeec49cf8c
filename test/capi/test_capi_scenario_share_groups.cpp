// Scenario tests of share groups through the C API (sova.h,
// sovaMemPoolShareGroupCreate / CaptureNext / Destroy; docs/graphs.md, "Graphs
// that never run at once"), written from the documentation only: graphs
// captured with sovaMallocFromPoolAsync / sovaFreeAsync (and sovaMallocAsync
// on the current pool), launched on the simulation in random order with
// kernels writing and checking per-graph bytes, the graph memory attributes
// and holdings, outputs freed at odd moments, bad arguments (each
// cudaErrorInvalidValue, nothing changed), and a pool destroyed while a group
// and its members are alive.
#include "capi_test_util.hpp"
#include "support/capi_stats.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

using namespace sova;
using namespace sova::capi_test;
using sova::test::stats_of;

namespace {

std::uint64_t graph_used(sovaMemPool_t pool) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, &v) == cudaSuccess);
  return v;
}

std::size_t holdings(sovaMemPool_t pool) {
  std::size_t count = 0x5A5A;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
  return count;
}

bool all_bytes(const void* p, std::size_t n, unsigned char b) { return holds(p, n, b); }

unsigned char tag_of(unsigned base, unsigned launch) { return static_cast<unsigned char>(base * 29u + launch * 11u + 3u); }

struct Member {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  void* scratch = nullptr;
  void* out = nullptr;
  std::size_t out_bytes = 0;
  std::unique_ptr<std::atomic<unsigned>> launches = std::make_unique<std::atomic<unsigned>>(0);
};

// A capture on `s`: scratch allocated and written, the output allocated and
// written from it, the scratch checked and freed (the docs' example order).
void capture_member(sovaMemPool_t pool, cudaStream_t s, std::size_t scratch, Member* m, unsigned base,
                    std::atomic<unsigned>* bad, bool current_pool = false) {
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  std::atomic<unsigned>* k = m->launches.get();
  sim().launch(s, [k] { k->fetch_add(1); });
  if (current_pool) {
    REQUIRE(sovaMallocAsync(&m->scratch, scratch, s) == cudaSuccess);
    REQUIRE(sovaMallocAsync(&m->out, m->out_bytes, s) == cudaSuccess);
  } else {
    REQUIRE(sovaMallocFromPoolAsync(&m->scratch, scratch, pool, s) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&m->out, m->out_bytes, pool, s) == cudaSuccess);
  }
  void* t = m->scratch;
  void* o = m->out;
  const std::size_t on = m->out_bytes;
  sim().launch(s, [t, scratch, k, base] { std::memset(t, tag_of(base, k->load()), scratch); });
  sim().launch(s, [t, scratch, o, on, k, base, bad] {
    if (!all_bytes(t, scratch, tag_of(base, k->load()))) bad->fetch_add(1);
    std::memset(o, tag_of(base + 1, k->load()), on);
  });
  REQUIRE(sovaFreeAsync(m->scratch, s) == cudaSuccess);
  REQUIRE(sim().end_capture(s, &m->graph) == cudaSuccess);
  REQUIRE(sim().graph_instantiate(&m->exec, m->graph) == cudaSuccess);
}

}  // namespace

TEST_CASE("C API share groups scenario: members hold one scratch, outputs intact in any launch order",
          "[capi][scenario][share_groups]") {
  constexpr int kMembers = 6;
  constexpr std::size_t kScratch = 6 * MiB;
  ScopedPool grouped_pool;
  ScopedPool plain_pool;
  ScopedStream s, s2, launch;
  std::uint64_t group = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(grouped_pool, &group) == cudaSuccess);
  CHECK(group == 1);  // ids from 1, per pool
  std::atomic<unsigned> bad{0};
  std::vector<Member> members(kMembers), plain(kMembers);
  std::uint64_t outputs = 0;
  for (int i = 0; i < kMembers; ++i) {
    const std::size_t out = MiB + static_cast<std::size_t>(i) * 4096 + 512;  // odd sizes
    members[static_cast<std::size_t>(i)].out_bytes = out;
    plain[static_cast<std::size_t>(i)].out_bytes = out;
    outputs += out;
    REQUIRE(sovaMemPoolShareGroupCaptureNext(grouped_pool, group, s) == cudaSuccess);
    capture_member(grouped_pool, s, kScratch, &members[static_cast<std::size_t>(i)], 2u * static_cast<unsigned>(i),
                   &bad);
    capture_member(plain_pool, s2, kScratch, &plain[static_cast<std::size_t>(i)], 100u + 2u * static_cast<unsigned>(i),
                   &bad);
  }
  const std::uint64_t held = graph_used(grouped_pool);
  const std::uint64_t held_plain = graph_used(plain_pool);
  INFO("grouped " << held << ", without a group " << held_plain);
  // About one scratch plus the outputs (block rounding of odd sizes allowed);
  // without a group the sum.
  CHECK(held >= kScratch + outputs);
  CHECK(held <= kScratch * 105 / 100 + outputs + kMembers * 64 * 1024);
  CHECK(held_plain >= kMembers * kScratch + outputs);
  CHECK(holdings(grouped_pool) == kMembers);
  std::uint64_t high = 0;
  REQUIRE(sovaMemPoolGetGraphMemAttribute(grouped_pool, cudaGraphMemAttrUsedMemHigh, &high) == cudaSuccess);
  CHECK(high == held);

  std::mt19937 rng(424242u);
  std::vector<int> order;
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < kMembers; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  auto intact = [&](const std::vector<Member>& ms, unsigned base0) {
    for (std::size_t i = 0; i < ms.size(); ++i) {
      const unsigned k = ms[i].launches->load();
      if (k == 0 || ms[i].out == nullptr) continue;
      INFO("output " << i << " after " << k << " launches");
      CHECK(all_bytes(ms[i].out, ms[i].out_bytes, tag_of(base0 + 2u * static_cast<unsigned>(i) + 1u, k)));
    }
  };
  for (int i : order) {
    REQUIRE(sim().graph_launch(members[static_cast<std::size_t>(i)].exec, launch) == cudaSuccess);
    REQUIRE(sim().graph_launch(plain[static_cast<std::size_t>(i)].exec, launch) == cudaSuccess);
    launch.synchronize();
    intact(members, 0);
    intact(plain, 100);
  }
  CHECK(bad.load() == 0);
  CHECK(graph_used(grouped_pool) == held);

  // The caller frees two outputs while their graphs live, on other streams
  // (once; a second free refused), the graphs launched again after.
  REQUIRE(sovaFreeAsync(members[1].out, s2) == cudaSuccess);
  CHECK(sovaFreeAsync(members[1].out, s) == cudaErrorInvalidValue);
  REQUIRE(sovaFreeAsync(members[4].out, 0) == cudaSuccess);  // the legacy stream
  members[1].out = nullptr;
  members[4].out = nullptr;
  for (Member& m : members) REQUIRE(sim().graph_launch(m.exec, launch) == cudaSuccess);
  launch.synchronize();
  intact(members, 0);
  CHECK(bad.load() == 0);
  CHECK(graph_used(grouped_pool) == held);

  // The group destroyed first: its members still hold what they use.
  REQUIRE(sovaMemPoolShareGroupDestroy(grouped_pool, group) == cudaSuccess);
  CHECK(sovaMemPoolShareGroupDestroy(grouped_pool, group) == cudaErrorInvalidValue);
  CHECK(graph_used(grouped_pool) == held);
  for (std::size_t i = 0; i < members.size(); ++i) {
    REQUIRE(sim().graph_exec_destroy(members[i].exec) == cudaSuccess);
    REQUIRE(sim().graph_destroy(members[i].graph) == cudaSuccess);
    REQUIRE(sim().graph_exec_destroy(plain[i].exec) == cudaSuccess);
    REQUIRE(sim().graph_destroy(plain[i].graph) == cudaSuccess);
  }
  CHECK(graph_used(grouped_pool) == 0);
  CHECK(graph_used(plain_pool) == 0);
  CHECK(holdings(grouped_pool) == 0);
  // What the caller still holds: the outputs not freed, their bytes those of
  // the last launch.
  std::uint64_t live = 0;
  for (const Member& m : members)
    if (m.out != nullptr) live += m.out_bytes;
  CHECK(used(grouped_pool) == live);
  CHECK(used(plain_pool) == outputs);
  intact(members, 0);
  intact(plain, 100);
  for (Member& m : members)
    if (m.out != nullptr) REQUIRE(sovaFreeAsync(m.out, s) == cudaSuccess);
  for (Member& m : plain) REQUIRE(sovaFreeAsync(m.out, s2) == cudaSuccess);
  CHECK(used(grouped_pool) == 0);
  CHECK(used(plain_pool) == 0);
  CHECK(stats_of(grouped_pool).liveBlocks == 0);
}

TEST_CASE("C API share groups scenario: the device's current pool, through sovaMallocAsync",
          "[capi][scenario][share_groups]") {
  // sovaMallocAsync allocates from the device's current pool; a group of
  // that pool is named with its handle.
  REQUIRE(sim().set_current_device(0) == cudaSuccess);
  ScopedPool pool;
  REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
  ScopedStream s, launch;
  std::uint64_t group = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &group) == cudaSuccess);
  std::atomic<unsigned> bad{0};
  std::vector<Member> members(4);
  for (std::size_t i = 0; i < members.size(); ++i) {
    members[i].out_bytes = 2 * MiB;
    REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, group, s) == cudaSuccess);
    capture_member(pool, s, 10 * MiB, &members[i], static_cast<unsigned>(2 * i), &bad, true);
    if (i > 0) CHECK(members[i].scratch == members[0].scratch);
  }
  CHECK(graph_used(pool) == 10 * MiB + 4 * 2 * MiB);
  for (int r = 0; r < 3; ++r)
    for (std::size_t i = members.size(); i-- > 0;) REQUIRE(sim().graph_launch(members[i].exec, launch) == cudaSuccess);
  launch.synchronize();
  CHECK(bad.load() == 0);
  for (std::size_t i = 0; i < members.size(); ++i)
    CHECK(all_bytes(members[i].out, members[i].out_bytes, tag_of(static_cast<unsigned>(2 * i + 1), 3)));
  for (Member& m : members) {
    REQUIRE(sim().graph_exec_destroy(m.exec) == cudaSuccess);
    REQUIRE(sim().graph_destroy(m.graph) == cudaSuccess);
  }
  // Every member released, the group alive: it holds its block.
  CHECK(graph_used(pool) == 10 * MiB);
  REQUIRE(sovaMemPoolShareGroupDestroy(pool, group) == cudaSuccess);
  CHECK(graph_used(pool) == 0);
  for (Member& m : members) REQUIRE(sovaFreeAsync(m.out, s) == cudaSuccess);
  CHECK(used(pool) == 0);
  sovaMemPool_t dflt = default_pool(0);
  REQUIRE(sovaDeviceSetMemPool(0, dflt) == cudaSuccess);
}

TEST_CASE("C API share groups scenario: bad arguments are refused and change nothing",
          "[capi][scenario][share_groups]") {
  // sova.h: "Bad pool, group, pointer or stream: cudaErrorInvalidValue,
  // nothing changed."
  ScopedPool pool;
  ScopedPool other;
  ScopedStream s, s2;
  std::uint64_t g = 0, o1 = 0, o2 = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &g) == cudaSuccess);
  REQUIRE(sovaMemPoolShareGroupCreate(other, &o1) == cudaSuccess);
  REQUIRE(sovaMemPoolShareGroupCreate(other, &o2) == cudaSuccess);
  // A member holding a block, and a name left for s2.
  REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, g, s) == cudaSuccess);
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&t, 4 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(t, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, g, s2) == cudaSuccess);
  sovaMemPool_t dead = nullptr;
  {
    sovaMemPoolProps props = props_on(0);
    REQUIRE(sovaMemPoolCreate(&dead, &props) == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(dead) == cudaSuccess);  // the handle is invalid at once
  }
  auto refused = [&](auto call, const char* what) {
    INFO(what);
    const sovaMemPoolStats before = stats_of(pool);
    const std::uint64_t held_before = graph_used(pool);
    CHECK(call() == cudaErrorInvalidValue);
    const sovaMemPoolStats after = stats_of(pool);
    CHECK(after.usedCurrent == before.usedCurrent);
    CHECK(after.liveBlocks == before.liveBlocks);
    CHECK(graph_used(pool) == held_before);
  };
  std::uint64_t untouched = 0x77;
  refused([&] { return sovaMemPoolShareGroupCreate(pool, nullptr); }, "create into NULL");
  refused([&] { return sovaMemPoolShareGroupCreate(nullptr, &untouched); }, "create on a NULL pool");
  CHECK(untouched == 0x77);
  refused([&] { return sovaMemPoolShareGroupCreate(dead, &untouched); }, "create on a destroyed pool");
  CHECK(untouched == 0x77);
  refused([&] { return sovaMemPoolShareGroupCaptureNext(nullptr, g, s); }, "capture-next on a NULL pool");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(dead, 1, s); }, "capture-next on a destroyed pool");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(pool, g, 0); }, "capture-next on the legacy stream (0)");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(pool, g, cudaStreamLegacy); }, "capture-next on cudaStreamLegacy");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(pool, o2, s2); }, "capture-next with the other pool's id");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(pool, g + 9, s2); }, "capture-next with an id never made");
  refused([&] { return sovaMemPoolShareGroupDestroy(nullptr, g); }, "destroy on a NULL pool");
  refused([&] { return sovaMemPoolShareGroupDestroy(dead, 1); }, "destroy on a destroyed pool");
  refused([&] { return sovaMemPoolShareGroupDestroy(pool, 0); }, "destroy group 0");
  refused([&] { return sovaMemPoolShareGroupDestroy(pool, o2); }, "destroy the other pool's id");
  // The name left for s2 still stands: the next capture there joins and
  // reuses the group's block.
  REQUIRE(sim().begin_capture(s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4 * MiB, pool, s2) == cudaSuccess);
  CHECK(p == t);
  REQUIRE(sovaFreeAsync(p, s2) == cudaSuccess);
  cudaGraph_t g2 = nullptr;
  REQUIRE(sim().end_capture(s2, &g2) == cudaSuccess);
  CHECK(graph_used(pool) == 4 * MiB);
  REQUIRE(sim().graph_destroy(g2) == cudaSuccess);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  REQUIRE(sovaMemPoolShareGroupDestroy(pool, g) == cudaSuccess);
  refused([&] { return sovaMemPoolShareGroupDestroy(pool, g); }, "destroy twice");
  refused([&] { return sovaMemPoolShareGroupCaptureNext(pool, g, s); }, "capture-next on a destroyed group");
  std::uint64_t g3 = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &g3) == cudaSuccess);
  CHECK(g3 > g);  // never reused
  REQUIRE(sovaMemPoolShareGroupDestroy(pool, g3) == cudaSuccess);
  CHECK(graph_used(pool) == 0);
  CHECK(used(pool) == 0);
  CHECK(sovaMemPoolShareGroupDestroy(other, o1) == cudaSuccess);
  CHECK(sovaMemPoolShareGroupDestroy(other, o2) == cudaSuccess);
}

// sovaMemPoolDestroy destroys the pool's groups (their ids cannot be named
// through a destroyed handle): the pool is finalized once its members are
// released (before, its 8 MiB stayed with the driver for good).
TEST_CASE("C API share groups scenario: a pool destroyed while a group and a member hold its blocks",
          "[capi][scenario][share_groups]") {
  bool destroy_group_first = false;
  SECTION("the group left alive") {}
  SECTION("the group destroyed before the pool (control)") { destroy_group_first = true; }
  CAPTURE(destroy_group_first);
  // docs/graphs.md, "Limits": "A pool of the C API destroyed with
  // sovaMemPoolDestroy while graphs hold its blocks waits for them: it is
  // finalized ... once those graphs are released, by the destroy itself if
  // they already were, else by the first sovaDeviceGraphMemTrim of its device
  // after the release, or by a free of one of its blocks." Whether a group
  // left alive (it cannot be destroyed once the handle is gone) keeps the
  // pool from being finalized is not said; the docs' promise is read as: the
  // graphs released and trimmed, the memory goes back to the driver.
  ScopedStream s;
  REQUIRE(sovaDeviceGraphMemTrim(0) == cudaSuccess);
  const std::size_t physical_before = sim().counters().physical_bytes;
  ScopedPool scoped;
  sovaMemPool_t pool = scoped.release();
  std::uint64_t g = 0;
  REQUIRE(sovaMemPoolShareGroupCreate(pool, &g) == cudaSuccess);
  REQUIRE(sovaMemPoolShareGroupCaptureNext(pool, g, s) == cudaSuccess);
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&t, 8 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(t, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(s, &graph) == cudaSuccess);
  CHECK(sim().counters().physical_bytes >= physical_before + 8 * MiB);
  if (destroy_group_first) REQUIRE(sovaMemPoolShareGroupDestroy(pool, g) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  // The handle is invalid at once, everywhere.
  CHECK(sovaMemPoolShareGroupCaptureNext(pool, g, s) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolShareGroupDestroy(pool, g) == cudaErrorInvalidValue);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  s.synchronize();
  REQUIRE(sovaDeviceGraphMemTrim(0) == cudaSuccess);
  INFO("physical memory before the pool " << physical_before << ", after its graph and trim "
                                          << sim().counters().physical_bytes);
  CHECK(sim().counters().physical_bytes == physical_before);
}
