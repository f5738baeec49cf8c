// The driver-call budget (docs/design.md, "Driver calls per pair"): what one
// steady-state allocate/free pair asks of the driver on the caller's thread,
// by kind, in each configuration users run, against the table in design.md.
// A change that adds a call fails here until the table, and its reason, say so.
#include "budget/budget_measure.hpp"
#include "core/sim_pool_fixture.hpp"
#include "support/two_device_sim.hpp"

#include <sova/pool.hpp>

#include <cstdint>
#include <limits>
#include <thread>

using namespace sova;
using namespace sova::budget;

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * KiB;
/// test/torch_adapter/test_torch_adapter_budget.cpp's rows.
constexpr const char* kTorchPrefix = "torch adapter";

/// (allocate, a kernel, free) of `bytes` on `stream` through `pool`, counted;
/// the stream synchronized after, unless it captures.
Measured pool_pairs(SimDriver& sim, Pool& pool, const std::string& name, std::size_t bytes, cudaStream_t stream,
                    bool capturing = false) {
  Measured m{name, measure(sim, [&] {
                void* p = nullptr;
                REQUIRE(pool.try_allocate(&p, bytes, stream) == cudaSuccess);
                sim.launch(stream, [] {});
                REQUIRE(pool.try_deallocate(p, stream) == cudaSuccess);
              })};
  if (!capturing) REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  return m;
}

PoolOptions options(SimDriver& sim, bool keep) {
  PoolOptions o = test::options_on(sim);
  o.release_threshold = keep ? std::numeric_limits<std::uint64_t>::max() : 0;
  return o;
}

std::vector<Measured> measure_pool() {
  std::vector<Measured> out;
  struct Size {
    const char* label;
    std::size_t bytes;
  };
  const Size sizes[] = {{"4 KiB", 4 * KiB}, {"1 MiB", MiB}, {"4 MiB", 4 * MiB}, {"64 MiB", 64 * MiB}};
  for (const bool keep : {false, true}) {
    for (const Size& size : sizes) {
      SimDriver sim(test::small_sim());
      Pool pool(options(sim, keep));
      const cudaStream_t s = sim.create_stream();
      out.push_back(pool_pairs(sim, pool,
                               std::string("Pool ") + size.label + (keep ? ", threshold UINT64_MAX" : ", threshold 0"),
                               size.bytes, s));
      sim.destroy_stream(s);
    }
  }
  {
    SimDriver sim(test::small_sim());
    PoolOptions o = options(sim, false);
    o.check_streams = false;
    Pool pool(o);
    const cudaStream_t s = sim.create_stream();
    out.push_back(pool_pairs(sim, pool, "Pool 4 KiB, check_streams off", 4 * KiB, s));
    out.push_back(pool_pairs(sim, pool, "Pool 4 MiB, check_streams off", 4 * MiB, s));
    sim.destroy_stream(s);
  }
  {
    SimDriver sim(test::small_sim());
    Pool pool(options(sim, false));
    out.push_back(pool_pairs(sim, pool, "Pool legacy stream, 4 KiB", 4 * KiB, nullptr));
    out.push_back(pool_pairs(sim, pool, "Pool cudaStreamPerThread, 4 KiB", 4 * KiB, cudaStreamPerThread));
  }
  {
    // Each block allocated on A, written there, freed on B: B's frees are
    // A's next allocations (cross-stream reuse through fences). Both streams
    // are synchronized between pairs (not counted), so that A always finds
    // B's fence complete: without, whether it is depends on timing.
    SimDriver sim(test::small_sim());
    Pool pool(options(sim, false));
    const cudaStream_t a = sim.create_stream();
    const cudaStream_t b = sim.create_stream();
    for (const std::size_t bytes : {4 * KiB, 4 * MiB}) {
      out.push_back(Measured{
          std::string("Pool two streams, allocated on A, freed on B, ") + (bytes == 4 * KiB ? "4 KiB" : "4 MiB"),
          measure(
              sim,
              [&] {
                void* p = nullptr;
                REQUIRE(pool.try_allocate(&p, bytes, a) == cudaSuccess);
                sim.launch(a, [] {});
                REQUIRE(pool.try_deallocate(p, b) == cudaSuccess);
              },
              [&] {
                REQUIRE(sim.stream_synchronize(a) == cudaSuccess);
                REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
              })});
    }
    REQUIRE(sim.stream_synchronize(a) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
    sim.destroy_stream(b);
    sim.destroy_stream(a);
  }
  {
    SimDriver sim(test::two_device_sim(std::size_t{256} << 20));
    PoolOptions o = options(sim, false);
    o.device = 1;
    Pool pool(o);
    const cudaStream_t s = sim.create_stream(false, 1);
    out.push_back(pool_pairs(sim, pool, "Pool on device 1 of two, its stream, 4 KiB", 4 * KiB, s));
    sim.destroy_stream(s);
  }
  {
    SimDriver sim(test::small_sim());
    Pool pool(options(sim, false));
    const cudaStream_t s = sim.create_stream();
    void* warm = nullptr;
    REQUIRE(pool.try_allocate(&warm, 4 * KiB, s) == cudaSuccess);
    REQUIRE(pool.try_deallocate(warm, s) == cudaSuccess);
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    Measured m = pool_pairs(sim, pool, "Pool under stream capture (global mode), 4 KiB", 4 * KiB, s,
                            /*capturing=*/true);
    cudaGraph_t graph = nullptr;
    REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
    REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
    out.push_back(std::move(m));
    sim.destroy_stream(s);
  }
  {
    SimDriver sim(test::small_sim());
    Pool sleeping(options(sim, false));
    Pool pool(options(sim, false));
    const cudaStream_t s = sim.create_stream();
    void* held = nullptr;
    REQUIRE(sleeping.try_allocate(&held, 4 * MiB, s) == cudaSuccess);
    REQUIRE(sleeping.sleep(SleepMode::backup, s) == cudaSuccess);
    out.push_back(pool_pairs(sim, pool, "Pool beside a sleeping pool, 4 MiB", 4 * MiB, s));
    REQUIRE(sleeping.wake(s) == cudaSuccess);
    REQUIRE(sleeping.try_deallocate(held, s) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    sim.destroy_stream(s);
  }
  return out;
}

}  // namespace

TEST_CASE("driver-call budget: every configuration as docs/design.md's table says", "[budget]") {
  std::string error;
  const std::vector<Row> table = parse_table(design_md(), &error);
  INFO(error);
  REQUIRE(!table.empty());
  std::vector<Measured> measured = measure_pool();
  for (auto* more : {&measure_capi, &measure_capi_ptsz}) {
    for (Measured& m : more()) measured.push_back(std::move(m));
  }
  std::vector<Row> ours;  // the PyTorch adapter's rows are measured in its own executable
  for (const Row& row : table) {
    if (row.configuration.rfind(kTorchPrefix, 0) != 0) ours.push_back(row);
  }
  const std::string diff = compare(ours, measured);
  INFO(diff);
  CHECK(diff.empty());
}

TEST_CASE("driver-call budget: the table's parser refuses what is no table", "[budget]") {
  std::string error;
  CHECK(parse_table("# Design\n\nno section here\n", &error).empty());
  CHECK(error.find("no heading") != std::string::npos);
  CHECK(parse_table("### Driver calls per pair\n\ntext only\n\n## Next\n| configuration | a | b |\n", &error).empty());
  CHECK(error.find("no table") != std::string::npos);
  const std::string head = "### Driver calls per pair\n\n| configuration | calls | why |\n| --- | --- | --- |\n";
  CHECK(parse_table(head + "| `a` | stream_id 1 | r |\n| `a` | none | r |\n", &error).empty());
  CHECK(error.find("twice") != std::string::npos);
  CHECK(parse_table(head + "| `a` | cuda_magic 1 | r |\n", &error).empty());
  CHECK(error.find("cuda_magic") != std::string::npos);
  CHECK(parse_table(head + "| `a` | stream_id one | r |\n", &error).empty());
  CHECK(parse_table(head + "| `a` | stream_id 1 |  |\n", &error).empty());
  CHECK(parse_table(head, &error).empty());
  for (const char* bad : {"stream_id 0", "stream_id 1/0", "stream_id \u22641/s", "stream_id \u2264/ms", "stream_id 1 2",
                          "stream_id 1, stream_id 1"}) {
    CHECK(parse_table(head + "| `a` | " + bad + " | r |\n", &error).empty());
    CHECK(error.find("is not 'kind N'") != std::string::npos);
  }
  const std::vector<Row> rows = parse_table(
      head + "| `a` | stream_id 1, event_record 2 | r |\n| b | none | r |\n" +
          "| `c` | event_record_on 1/16, event_create_on \u22641/ms, event_query <=3/ms | r |\n",
      &error);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].configuration == "a");
  CHECK(rows[0].calls == Calls{{"event_record", Rate{Rate::Per::pairs, 2, 1}}, {"stream_id", Rate{Rate::Per::pairs, 1, 1}}});
  CHECK(rows[1].calls.empty());
  CHECK(format(rows[0].calls) == "event_record 2, stream_id 1");
  CHECK(rows[2].calls.at("event_record_on") == Rate{Rate::Per::pairs, 1, 16});
  CHECK(rows[2].calls.at("event_query") == Rate{Rate::Per::ms, 3, 1});
  CHECK(format(rows[2].calls) == "event_create_on \u22641/ms, event_query \u22643/ms, event_record_on 1/16");
}

TEST_CASE("driver-call budget: counts judged against each kind of rate", "[budget]") {
  const auto index = [](SimCall call) { return static_cast<std::size_t>(call); };
  Counted c;
  c.pairs = 64;
  c.elapsed_ns = 3'500'000;  // 3.5 ms: up to 5 intervals begun (3 whole, a part, one running at the start)
  c.counts[index(SimCall::stream_id)] = 64;
  c.counts[index(SimCall::event_record_on)] = 4;
  c.counts[index(SimCall::event_query)] = 5;
  const Calls row{{"stream_id", Rate{Rate::Per::pairs, 1, 1}},
                  {"event_record_on", Rate{Rate::Per::pairs, 1, 16}},
                  {"event_query", Rate{Rate::Per::ms, 1, 1}}};
  CHECK(departures(row, c).empty());
  CHECK(format(as_exact(c)) == "event_query 5/64, event_record_on 1/16, stream_id 1");

  c.counts[index(SimCall::event_query)] = 6;  // more than one per interval
  CHECK(departures(row, c).find("event_query: 6 in 3500 us") != std::string::npos);
  c.counts[index(SimCall::event_query)] = 0;  // a time-driven kind may not come at all
  CHECK(departures(row, c).empty());

  c.counts[index(SimCall::event_record_on)] = 5;  // count-driven: exact
  CHECK(departures(row, c).find("event_record_on: 5 in 64 pairs, 1/16 allows 4") != std::string::npos);
  c.counts[index(SimCall::event_record_on)] = 4;

  c.counts[index(SimCall::stream_synchronize)] = 1;  // a kind the row does not name
  CHECK(departures(row, c).find("stream_synchronize: 1 in 64 pairs, none allowed") != std::string::npos);
  c.counts[index(SimCall::stream_synchronize)] = 0;

  c.pairs = 40;  // no multiple of 16
  c.counts[index(SimCall::stream_id)] = 40;
  CHECK(departures(row, c).find("no multiple of 1/16's 16") != std::string::npos);
}

TEST_CASE("driver-call budget: a thread's count holds its own calls only", "[budget]") {
  SimDriver sim(test::small_sim());
  const cudaStream_t s = sim.create_stream();
  std::array<std::size_t, kSimCallKinds> mine{};
  sim.count_this_thread(&mine);
  bool capturing = true;
  REQUIRE(sim.stream_is_capturing(s, &capturing) == cudaSuccess);
  std::thread other([&] {
    unsigned long long id = 0;
    REQUIRE(sim.stream_id(s, &id) == cudaSuccess);
  });
  other.join();
  sim.count_this_thread(nullptr);
  REQUIRE(sim.stream_is_capturing(s, &capturing) == cudaSuccess);  // after: not counted
  CHECK(mine[static_cast<std::size_t>(SimCall::stream_is_capturing)] == 1);
  CHECK(mine[static_cast<std::size_t>(SimCall::stream_id)] == 0);
  const SimCounters c = sim.counters();
  CHECK(c.of(SimCall::stream_is_capturing) == 2);  // every thread's
  CHECK(c.of(SimCall::stream_id) == 1);
  sim.destroy_stream(s);
}
