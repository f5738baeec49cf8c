// Scenario tests of sovaMemPoolGetGraphHoldings (sova.h; docs/graphs.md,
// "Which graph holds what"), written from the documentation only: the sizing
// call and the full call, a capacity below the count, bad arguments (each
// cudaErrorInvalidValue with nothing written), the default pool reached
// through sovaMallocAsync on a capturing stream, and the reserved bytes.
//
// Entries are poisoned (0xAB) before each call so that "nothing written" and
// "only capacity entries written" are checked byte for byte.
#include "capi_test_util.hpp"
#include "support/capi_stats.hpp"

#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace sova;
using namespace sova::capi_test;

namespace {

constexpr unsigned char kPoison = 0xAB;
constexpr std::size_t kSentinelCount = 0x5A5A5A5A;

std::vector<sovaGraphHolding> poisoned(std::size_t n) {
  std::vector<sovaGraphHolding> v(n);
  std::memset(v.data(), kPoison, n * sizeof(sovaGraphHolding));
  return v;
}

bool untouched(const sovaGraphHolding& h) {
  const auto* p = reinterpret_cast<const unsigned char*>(&h);
  for (std::size_t i = 0; i < sizeof h; ++i)
    if (p[i] != kPoison) return false;
  return true;
}

bool reserved_zero(const sovaGraphHolding& h) {
  for (unsigned char c : h.reserved)
    if (c != 0) return false;
  return true;
}

unsigned long long capture_id(cudaStream_t s) {
  CaptureInfo info;
  REQUIRE(sim().stream_capture_info(s, &info) == cudaSuccess);
  return info.id;
}

// What the test expects of one graph.
struct Want {
  unsigned long long id;
  std::uint64_t held_bytes, held_blocks, output_bytes, output_blocks;
  int capturing;
};

void check_entry(const sovaGraphHolding& got, const Want& want) {
  INFO("capture " << want.id);
  CHECK(got.captureId == want.id);
  CHECK(got.heldBytes == want.held_bytes);
  CHECK(got.heldBlocks == want.held_blocks);
  CHECK(got.outputBytes == want.output_bytes);
  CHECK(got.outputBlocks == want.output_blocks);
  CHECK(got.capturing == want.capturing);
  CHECK(reserved_zero(got));
}

// A capture on `s` allocating `sizes` from `pool` and freeing, in the graph,
// the blocks whose index is in `freed`: its id; the blocks not freed go to *outputs.
unsigned long long capture(sovaMemPool_t pool, cudaStream_t s, const std::vector<std::size_t>& sizes,
                           const std::set<std::size_t>& freed, std::vector<void*>* outputs, cudaGraph_t* graph) {
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_id(s);
  std::vector<void*> got;
  for (std::size_t bytes : sizes) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, bytes, pool, s) == cudaSuccess);
    got.push_back(p);
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (freed.count(i) != 0)
      REQUIRE(sovaFreeAsync(got[i], s) == cudaSuccess);
    else
      outputs->push_back(got[i]);
  }
  REQUIRE(sim().end_capture(s, graph) == cudaSuccess);
  return id;
}

// Three graphs on `pool`, captured on s1, s2, s1: their expected entries, in
// order of capture id.
struct ThreeGraphs {
  std::vector<Want> want;
  std::vector<cudaGraph_t> graphs;
  std::vector<void*> outputs;

  ThreeGraphs(sovaMemPool_t pool, cudaStream_t s1, cudaStream_t s2) {
    cudaGraph_t g = nullptr;
    // 2 + 1 MiB, the 1 MiB freed in the graph.
    unsigned long long id = capture(pool, s1, {2 * MiB, 1 * MiB}, {1}, &outputs, &g);
    graphs.push_back(g);
    want.push_back({id, 3 * MiB, 2, 2 * MiB, 1, 1});
    id = capture(pool, s2, {3 * MiB}, {}, &outputs, &g);
    graphs.push_back(g);
    want.push_back({id, 3 * MiB, 1, 3 * MiB, 1, 1});
    id = capture(pool, s1, {4 * MiB, 1 * MiB, 1 * MiB}, {}, &outputs, &g);
    graphs.push_back(g);
    want.push_back({id, 6 * MiB, 3, 6 * MiB, 3, 1});
    // The first graph's stream was used again by the third capture, which
    // finds it outside the first (the C++ scenario checks that flag); the
    // entries' `capturing` is compared where the stream was not reused.
  }
  void release(sovaMemPool_t pool, cudaStream_t s) {
    for (cudaGraph_t g : graphs) REQUIRE(sim().graph_destroy(g) == cudaSuccess);
    for (void* p : outputs) REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    std::size_t count = kSentinelCount;
    REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
    CHECK(count == 0);
  }
};

void check_except_capturing(const sovaGraphHolding& got, const Want& want) {
  Want w = want;
  w.capturing = got.capturing;
  check_entry(got, w);
}

}  // namespace

TEST_CASE("C API holdings scenario: the sizing call, then the full call", "[capi][graphs][scenario]") {
  ScopedPool pool;
  ScopedStream s1, s2;
  std::size_t count = kSentinelCount;
  // A pool without graphs: zero, nothing written.
  std::vector<sovaGraphHolding> none = poisoned(2);
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, none.data(), none.size(), &count) == cudaSuccess);
  CHECK(count == 0);
  CHECK(untouched(none[0]));
  CHECK(untouched(none[1]));

  ThreeGraphs three(pool, s1, s2);
  // Sizing: capacity 0 and no array.
  count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
  REQUIRE(count == 3);
  // Capacity 0 with an array: the count, nothing written.
  std::vector<sovaGraphHolding> buf = poisoned(5);
  count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, buf.data(), 0, &count) == cudaSuccess);
  CHECK(count == 3);
  for (const sovaGraphHolding& h : buf) CHECK(untouched(h));
  // The full call, sized by the first: the entries, in order of capture id,
  // reserved bytes zero; nothing beyond.
  count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, buf.data(), 3, &count) == cudaSuccess);
  REQUIRE(count == 3);
  for (std::size_t i = 0; i < 3; ++i) check_except_capturing(buf[i], three.want[i]);
  CHECK(buf[1].capturing == 1);  // no call has seen s2 outside its capture since
  CHECK(buf[2].capturing == 1);
  CHECK(buf[0].captureId < buf[1].captureId);
  CHECK(buf[1].captureId < buf[2].captureId);
  CHECK(untouched(buf[3]));
  CHECK(untouched(buf[4]));
  // More room than needed: the same three, the rest untouched.
  buf = poisoned(5);
  count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, buf.data(), buf.size(), &count) == cudaSuccess);
  REQUIRE(count == 3);
  for (std::size_t i = 0; i < 3; ++i) check_except_capturing(buf[i], three.want[i]);
  CHECK(untouched(buf[3]));
  CHECK(untouched(buf[4]));
  // The totals agree: no block is held by two graphs here.
  std::uint64_t used = 0;
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, &used) == cudaSuccess);
  CHECK(used == 12 * MiB);
  const sovaMemPoolStats stats = sova::test::stats_of(pool);
  CHECK(stats.graphs == 3);
  CHECK(stats.graphHeldBlocks == 6);
  CHECK(stats.graphHeldBytes == 12 * MiB);
  three.release(pool, s1);
}

TEST_CASE("C API holdings scenario: a capacity below the count writes only that many", "[capi][graphs][scenario]") {
  ScopedPool pool;
  ScopedStream s1, s2;
  ThreeGraphs three(pool, s1, s2);
  for (std::size_t capacity : {std::size_t{1}, std::size_t{2}}) {
    INFO("capacity " << capacity);
    std::vector<sovaGraphHolding> buf = poisoned(4);
    std::size_t count = kSentinelCount;
    // "Writes min(count, capacity) entries to `holdings` and the number of
    // graphs to *count".
    CHECK(sovaMemPoolGetGraphHoldings(pool, buf.data(), capacity, &count) == cudaSuccess);
    CHECK(count == 3);
    for (std::size_t i = 0; i < capacity; ++i) check_except_capturing(buf[i], three.want[i]);
    for (std::size_t i = capacity; i < buf.size(); ++i) CHECK(untouched(buf[i]));
  }
  three.release(pool, s1);
}

TEST_CASE("C API holdings scenario: bad arguments are refused and write nothing", "[capi][graphs][scenario]") {
  ScopedPool pool;
  ScopedStream s1, s2;
  ThreeGraphs three(pool, s1, s2);  // a good call would write three entries
  // A pool destroyed with nothing in it, and one destroyed while a graph
  // still holds its memory (finalized later, the handle invalid at once).
  sovaMemPool_t destroyed = nullptr;
  {
    const sovaMemPoolProps props = props_on(0);
    REQUIRE(sovaMemPoolCreate(&destroyed, &props) == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(destroyed) == cudaSuccess);
  }
  sovaMemPool_t destroyed_holding = nullptr;
  std::vector<void*> held_outputs;
  cudaGraph_t held_graph = nullptr;
  {
    const sovaMemPoolProps props = props_on(0);
    REQUIRE(sovaMemPoolCreate(&destroyed_holding, &props) == cudaSuccess);
    capture(destroyed_holding, s2, {MiB}, {}, &held_outputs, &held_graph);
    REQUIRE(sovaMemPoolDestroy(destroyed_holding) == cudaSuccess);
  }
  int not_a_pool = 0;
  struct Case {
    const char* what;
    sovaMemPool_t pool;
    bool holdings;
    std::size_t capacity;
    bool count;
  };
  const Case cases[] = {
      {"NULL count", pool, true, 4, false},
      {"NULL count, sizing", pool, false, 0, false},
      {"NULL holdings with capacity > 0", pool, false, 4, true},
      {"NULL pool", nullptr, true, 4, true},
      {"NULL pool, sizing", nullptr, false, 0, true},
      {"a destroyed pool", destroyed, true, 4, true},
      {"a pool destroyed while a graph holds its memory", destroyed_holding, true, 4, true},
      {"a pointer that is not a pool", reinterpret_cast<sovaMemPool_t>(&not_a_pool), true, 4, true},
      {"a made-up handle", reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0xdeadbeef}), true, 4, true},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    std::vector<sovaGraphHolding> buf = poisoned(4);
    std::size_t count = kSentinelCount;
    CHECK(sovaMemPoolGetGraphHoldings(c.pool, c.holdings ? buf.data() : nullptr, c.capacity,
                                      c.count ? &count : nullptr) == cudaErrorInvalidValue);
    CHECK(count == kSentinelCount);
    for (const sovaGraphHolding& h : buf) CHECK(untouched(h));
    // The thread's last error names the call (sova.h, sovaGetLastErrorMessage).
    CHECK(std::string(sovaGetLastErrorMessage()).find("sovaMemPoolGetGraphHoldings") != std::string::npos);
  }
  CHECK(not_a_pool == 0);
  // The valid pool is as it was.
  std::vector<sovaGraphHolding> buf = poisoned(3);
  std::size_t count = 0;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, buf.data(), buf.size(), &count) == cudaSuccess);
  CHECK(count == 3);
  for (std::size_t i = 0; i < 3; ++i) check_except_capturing(buf[i], three.want[i]);

  // The pool destroyed while holding: released graph, freed output, finalized.
  REQUIRE(sim().graph_destroy(held_graph) == cudaSuccess);
  for (void* p : held_outputs) CHECK(sovaFreeAsync(p, s2) == cudaSuccess);
  three.release(pool, s1);
}

TEST_CASE("C API holdings scenario: the default pool through sovaMallocAsync on a capturing stream",
          "[capi][graphs][scenario]") {
  REQUIRE(sim().set_current_device(0) == cudaSuccess);
  const sovaMemPool_t def = default_pool(0);
  sovaMemPool_t current = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
  REQUIRE(current == def);  // the tests leave each device's default pool current
  ScopedStream s, other;

  // The default pool is shared by the binary's tests: what is there before
  // must be there after, untouched; ours is found by its id.
  auto holdings = [&]() {
    std::size_t count = 0;
    REQUIRE(sovaMemPoolGetGraphHoldings(def, nullptr, 0, &count) == cudaSuccess);
    std::vector<sovaGraphHolding> buf = poisoned(count + 1);
    std::size_t again = 0;
    REQUIRE(sovaMemPoolGetGraphHoldings(def, buf.data(), buf.size(), &again) == cudaSuccess);
    REQUIRE(again == count);  // nothing else captures meanwhile
    CHECK(untouched(buf[count]));
    buf.resize(count);
    for (std::size_t i = 1; i < count; ++i) CHECK(buf[i - 1].captureId < buf[i].captureId);
    for (const sovaGraphHolding& h : buf) CHECK(reserved_zero(h));
    return buf;
  };
  auto find = [](const std::vector<sovaGraphHolding>& v, unsigned long long id) -> const sovaGraphHolding* {
    for (const sovaGraphHolding& h : v)
      if (h.captureId == id) return &h;
    return nullptr;
  };
  const std::vector<sovaGraphHolding> before = holdings();

  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_id(s);
  CHECK(find(holdings(), id) == nullptr);  // nothing allocated yet
  void* out = nullptr;
  void* tmp = nullptr;
  REQUIRE(sovaMallocAsync(&out, 2 * MiB, s) == cudaSuccess);
  REQUIRE(sovaMallocAsync(&tmp, 1 * MiB, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(tmp, s) == cudaSuccess);  // freed in the graph
  {
    const std::vector<sovaGraphHolding> during = holdings();
    REQUIRE(during.size() == before.size() + 1);
    const sovaGraphHolding* ours = find(during, id);
    REQUIRE(ours != nullptr);
    check_entry(*ours, {id, 3 * MiB, 2, 2 * MiB, 1, 1});
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(s, &graph) == cudaSuccess);
  {
    const std::vector<sovaGraphHolding> after_end = holdings();
    const sovaGraphHolding* ours = find(after_end, id);
    REQUIRE(ours != nullptr);
    check_entry(*ours, {id, 3 * MiB, 2, 2 * MiB, 1, 1});  // "may still be in progress": no call saw s since
  }
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim().graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim().graph_launch(exec, other) == cudaSuccess);
  other.synchronize();
  // The caller's free of the output on s: s seen outside the capture; the
  // memory stays with the graph.
  REQUIRE(sovaFreeAsync(out, s) == cudaSuccess);
  {
    const std::vector<sovaGraphHolding> freed = holdings();
    const sovaGraphHolding* ours = find(freed, id);
    REQUIRE(ours != nullptr);
    check_entry(*ours, {id, 3 * MiB, 2, 2 * MiB, 1, 0});
  }
  CHECK(sovaFreeAsync(out, other) == cudaErrorInvalidValue);  // final for the caller
  REQUIRE(sim().graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  // Released: no longer listed; the others as they were.
  const std::vector<sovaGraphHolding> after = holdings();
  CHECK(find(after, id) == nullptr);
  REQUIRE(after.size() == before.size());
  for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].captureId == before[i].captureId);
}

TEST_CASE("C API holdings scenario: released graphs are collected first", "[capi][graphs][scenario]") {
  // sova.h: "released graphs are collected first": the holdings call itself,
  // the first call after the release, no longer lists the graph, and the
  // totals read after it agree.
  ScopedPool pool;
  ScopedStream s1, s2;
  std::vector<void*> outputs;
  cudaGraph_t g1 = nullptr, g2 = nullptr;
  const unsigned long long id1 = capture(pool, s1, {2 * MiB}, {}, &outputs, &g1);
  const unsigned long long id2 = capture(pool, s2, {1 * MiB, 1 * MiB}, {0}, &outputs, &g2);
  REQUIRE(sim().graph_destroy(g1) == cudaSuccess);
  std::vector<sovaGraphHolding> buf = poisoned(3);
  std::size_t count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, buf.data(), buf.size(), &count) == cudaSuccess);
  REQUIRE(count == 1);
  check_entry(buf[0], {id2, 2 * MiB, 2, 1 * MiB, 1, 1});
  CHECK(buf[0].captureId != id1);
  CHECK(untouched(buf[1]));
  std::uint64_t held = 0;
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, &held) == cudaSuccess);
  CHECK(held == 2 * MiB);
  REQUIRE(sim().graph_destroy(g2) == cudaSuccess);
  count = kSentinelCount;
  REQUIRE(sovaMemPoolGetGraphHoldings(pool, nullptr, 0, &count) == cudaSuccess);
  CHECK(count == 0);
  // The outputs stay the caller's: still used until freed.
  CHECK(used(pool) == 3 * MiB);
  for (void* p : outputs) CHECK(sovaFreeAsync(p, s1) == cudaSuccess);
  CHECK(used(pool) == 0);
}
