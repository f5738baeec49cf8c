// [scenario][sleep][first_sleep][pin_ahead] Pinning ahead of a first sleep, and
// releases of the kept backup racing it, written from docs/sleep-wake.md
// ("Pinning ahead, and the host memory budget", "Keep or release the backup
// after wake") and the public headers alone: pin-ahead reaches its target and
// the first sleep then pins nothing; a budget caps it; releases on another
// thread while the pool grows and pin-ahead pins, and while the pool sleeps
// and wakes, lose no kept byte and leave nothing pinned once the last release
// returns; a pool destroyed with a pin in flight leaves nothing pinned.
// Suite 'sim' (test/sova_tests).
#include "sleep/first_sleep_scenario.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::first_sleep;

namespace {

struct PinAheadPool {
  SimDriver sim;
  std::unique_ptr<Pool> pool;
  cudaStream_t s = nullptr;
  std::vector<Block> blocks;
  std::uint32_t tag = 1;

  explicit PinAheadPool(std::size_t budget = 0, bool pin_ahead = true) : sim(config()) {
    PoolOptions options;
    options.driver = &sim;
    options.release_threshold = UINT64_MAX;
    options.sleep_pin_ahead = pin_ahead;
    options.sleep_host_budget = budget;
    pool = std::make_unique<Pool>(options);
    s = sim.create_stream();
  }
  ~PinAheadPool() {
    sim.stream_synchronize(s);
    for (const Block& b : blocks) pool->deallocate(b.ptr, s);
    sim.stream_synchronize(s);
    pool.reset();
    sim.destroy_stream(s);
  }
  static SimConfig config() {
    SimConfig c;
    c.total_memory = std::size_t{512} << 20;
    return c;
  }
  void add(std::size_t n) {
    Block b;
    b.ptr = pool->allocate(n, s);
    b.bytes = n;
    b.tag = tag++;
    fill_on(sim, s, b);
    blocks.push_back(b);
  }
  std::size_t wrong() {
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    return wrong_in(blocks);
  }
  /// Pin-ahead done: "when sleepPinAheadBytes (or sleepHostBytes) reaches
  /// sleepPinAheadTarget".
  bool reached_target() const {
    const PoolStats st = pool->stats();
    return st.sleep_pin_ahead_target > 0 && st.sleep_host_bytes >= st.sleep_pin_ahead_target;
  }
  void cycle() {
    REQUIRE(pool->sleep(SleepMode::backup, s) == cudaSuccess);
    REQUIRE(pool->wake(s) == cudaSuccess);
    CHECK(wrong() == 0);
  }
};

}  // namespace

TEST_CASE("scenario: pin-ahead pins the first sleep's host memory, and the first sleep then pins nothing",
          "[scenario][sleep][first_sleep][pin_ahead]") {
  PinAheadPool x;
  for (std::size_t n : {30 * kMiB + 5, 64 * kMiB, 7 * kMiB, 100 * kKiB, 50 * kMiB}) x.add(n);
  REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
  REQUIRE(eventually([&] { return x.reached_target(); }));
  const PoolStats st = x.pool->stats();
  // Without a budget the target is the most a successful growth reserved:
  // no growth failed and nothing was reset, so reservedHigh.
  CHECK(st.sleep_pin_ahead_target == st.reserved_high);
  CHECK(st.sleep_pin_ahead_bytes == st.sleep_host_bytes);
  CHECK(st.sleep_pin_ahead_failures == 0);
  CHECK(x.sim.counters().pinned_host_bytes == st.sleep_host_bytes);
  const std::size_t pins = pin_calls(x.sim);
  x.cycle();
  CHECK(pin_calls(x.sim) == pins);  // "the first sleep ... pins nothing"
  CHECK(x.pool->stats().sleep_host_bytes == st.sleep_host_bytes);
}

TEST_CASE("scenario: a budget caps pin-ahead at the multiple of 2 MiB below it",
          "[scenario][sleep][first_sleep][pin_ahead][budget]") {
  SECTION("101 MiB: 100 MiB pinned ahead, a bigger backup refused with nothing copied or released") {
    const std::size_t budget = 101 * kMiB;
    PinAheadPool x(budget);
    for (int i = 0; i < 6; ++i) x.add(30 * kMiB);  // 180 MiB live: more than the budget
    REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
    REQUIRE(eventually([&] { return x.reached_target(); }));
    PoolStats st = x.pool->stats();
    CHECK(st.sleep_pin_ahead_target == 100 * kMiB);
    CHECK(st.sleep_host_bytes == 100 * kMiB);
    CHECK(st.sleep_host_budget == budget);
    const SimCounters c0 = x.sim.counters();
    CHECK(x.pool->sleep(SleepMode::backup, x.s) == cudaErrorMemoryAllocation);
    CHECK_FALSE(x.pool->asleep());
    CHECK(x.sim.counters().copies == c0.copies);
    CHECK(x.sim.counters().unmaps == c0.unmaps);
    CHECK(x.pool->stats().sleep_budget_refusals == 1);
    CHECK(x.pool->stats().sleep_host_bytes == 100 * kMiB);
    CHECK(x.wrong() == 0);
    // Within the budget once blocks are freed: the sleep uses what was pinned ahead.
    for (int i = 0; i < 3; ++i) {
      x.pool->deallocate(x.blocks.back().ptr, x.s);
      x.blocks.pop_back();
    }
    const std::size_t pins = pin_calls(x.sim);
    x.cycle();
    CHECK(pin_calls(x.sim) == pins);
    CHECK(x.pool->stats().sleep_host_bytes <= budget);
  }
  SECTION("under 2 MiB: nothing pinned ahead") {
    PinAheadPool x(2 * kMiB - 1);
    x.add(20 * kMiB);
    REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // four of the thread's looks
    CHECK(x.pool->stats().sleep_pin_ahead_target == 0);
    CHECK(x.pool->stats().sleep_host_bytes == 0);
    CHECK(x.sim.counters().pinned_host_bytes == 0);
  }
}

TEST_CASE("scenario: releases on another thread racing pin-ahead as the pool grows",
          "[scenario][sleep][first_sleep][pin_ahead][race]") {
  for (std::uint64_t seed : {11, 12, 13}) {
    INFO("seed " << seed);
    PinAheadPool x;
    x.sim.delay_host_pins(std::chrono::microseconds(8000));  // pins in flight for a while
    std::atomic<bool> done{false};
    std::atomic<int> releases{0}, bad{0};
    std::thread racer([&] {
      std::mt19937_64 rng(seed);
      while (!done.load()) {
        // The pool is awake throughout: every release must succeed.
        if (x.pool->release_sleep_host_memory() != cudaSuccess) bad.fetch_add(1);
        releases.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 12000));
      }
    });
    std::mt19937_64 rng(seed * 7);
    for (int i = 0; i < 24; ++i) {
      x.add(2 * kMiB + rng() % (8 * kMiB));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 6000));
    }
    done.store(true);
    racer.join();
    x.sim.delay_host_pins(std::chrono::microseconds(0));
    CHECK(bad.load() == 0);
    CHECK(releases.load() > 0);
    CHECK(x.wrong() == 0);

    // The last release: everything given back, and pin-ahead holds.
    REQUIRE(x.pool->release_sleep_host_memory() == cudaSuccess);
    PoolStats st = x.pool->stats();
    CHECK(st.sleep_host_bytes == 0);
    CHECK(st.sleep_pin_ahead_bytes == 0);
    CHECK(st.sleep_pin_ahead_target == 0);
    CHECK(x.sim.counters().pinned_host_bytes == 0);
    CHECK(x.sim.counters().host_mapped_bytes == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(x.pool->stats().sleep_host_bytes == 0);  // "memory released on purpose is not taken back"
    CHECK(x.sim.counters().pinned_host_bytes == 0);

    // Growth beyond anything reserved before: pin-ahead pins again, and the
    // first sleep after it pins nothing.
    x.add(40 * kMiB);
    REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
    REQUIRE(eventually([&] { return x.reached_target(); }));
    st = x.pool->stats();
    CHECK(st.sleep_pin_ahead_target == st.reserved_high);
    const std::size_t pins = pin_calls(x.sim);
    x.cycle();
    CHECK(pin_calls(x.sim) == pins);
  }
}

TEST_CASE("scenario: releases on another thread while the pool sleeps and wakes lose no kept byte",
          "[scenario][sleep][first_sleep][pin_ahead][race]") {
  for (bool pin_ahead : {false, true}) {
    INFO("pin-ahead " << pin_ahead);
    PinAheadPool x(0, pin_ahead);
    for (std::size_t n : {40 * kMiB, 9 * kMiB + 1, 70 * kMiB + 3000, 300 * kKiB}) x.add(n);
    REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
    std::atomic<bool> done{false};
    std::atomic<int> ok{0}, not_permitted{0}, other{0};
    std::thread racer([&] {
      std::mt19937_64 rng(pin_ahead ? 5 : 6);
      while (!done.load()) {
        // Awake: released; asleep: cudaErrorNotPermitted ("the backups are in it").
        const cudaError_t rc = x.pool->release_sleep_host_memory();
        (rc == cudaSuccess ? ok : rc == cudaErrorNotPermitted ? not_permitted : other).fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      }
    });
    for (int cycle = 0; cycle < 8; ++cycle) {
      INFO("cycle " << cycle);
      for (Block& b : x.blocks) {
        b.tag += 1000;
        fill_on(x.sim, x.s, b);
      }
      REQUIRE(x.pool->sleep(SleepMode::backup, x.s) == cudaSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      REQUIRE(x.pool->wake(x.s) == cudaSuccess);
      CHECK(x.wrong() == 0);
    }
    done.store(true);
    racer.join();
    INFO("releases: " << ok.load() << " done, " << not_permitted.load() << " refused asleep");
    CHECK(other.load() == 0);
    CHECK(ok.load() > 0);
    REQUIRE(x.pool->release_sleep_host_memory() == cudaSuccess);
    CHECK(x.pool->stats().sleep_host_bytes == 0);
    CHECK(x.sim.counters().pinned_host_bytes == 0);
    CHECK(x.sim.counters().host_mapped_bytes == 0);
  }
}

TEST_CASE("scenario: a pool destroyed while pin-ahead pins leaves nothing pinned",
          "[scenario][sleep][first_sleep][pin_ahead]") {
  SimDriver sim(PinAheadPool::config());
  sim.delay_host_pins(std::chrono::microseconds(150000));
  {
    PoolOptions options;
    options.driver = &sim;
    options.sleep_pin_ahead = true;
    Pool pool(options);
    const cudaStream_t s = sim.create_stream();
    void* p = pool.allocate(60 * kMiB, s);
    // A pin begun and not done.
    REQUIRE(eventually([&] {
      const SimCounters c = sim.counters();
      return c.host_register_calls + c.host_alloc_calls > c.host_registers + c.host_allocs;
    }));
    pool.deallocate(p, s);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    sim.destroy_stream(s);
  }
  sim.delay_host_pins(std::chrono::microseconds(0));
  CHECK(sim.counters().pinned_host_bytes == 0);
  CHECK(sim.counters().host_mapped_bytes == 0);
}

TEST_CASE("scenario: a slab the host refuses to pin-ahead is counted, and the first sleep pins the rest",
          "[scenario][sleep][first_sleep][pin_ahead]") {
  PinAheadPool x;
  x.sim.fail_host_map_at(1, cudaErrorMemoryAllocation);  // the thread's first mapping
  x.add(60 * kMiB + 11);  // one growth: no other growth to wake the thread after the failure
  REQUIRE(x.sim.stream_synchronize(x.s) == cudaSuccess);
  // "Failures are not errors. A slab the host refuses (out of pinned memory)
  // is counted (sleep_pin_ahead_failures) and pin-ahead holds until the pool
  // grows again"
  REQUIRE(eventually([&] { return x.pool->stats().sleep_pin_ahead_failures >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(x.pool->stats().sleep_pin_ahead_failures == 1);
  CHECK(x.pool->stats().sleep_pin_ahead_target == 0);  // "0 ... after a failure until it grows"
  const std::uint64_t held = x.pool->stats().sleep_host_bytes;
  CHECK(held < x.pool->stats().reserved_current);
  // "the first sleep then pins the rest, as without pin-ahead"
  const std::size_t pins = pin_calls(x.sim);
  x.cycle();
  CHECK(pin_calls(x.sim) > pins);
  CHECK(x.pool->stats().sleep_host_bytes >= x.blocks[0].bytes);
  CHECK(x.pool->sleep_pin_refusal() == SleepPinRefusal::none);
}
