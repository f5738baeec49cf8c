// [scenario][sleep][first_sleep] The limits a first sleep can hit, written from
// docs/sleep-wake.md ("The limits a first sleep can hit", "The budget"),
// include/sova/sleep.hpp (SleepPinRefusal), include/sova/sova.h and the
// simulation's failure injection (include/sova/sim.hpp) alone:
//  * a refusal at each slab of a first sleep, of each kind the docs name (the
//    mapping, the lock, a copy), and at each new slab of a sleep that backs
//    up more than any before, and of reserve_sleep_backup: the pool awake,
//    every byte intact, the host memory held as before, the limit named;
//  * the locked-memory limit (SimConfig::pinned_host_memory) reached part-way;
//  * host budgets below, at and above what the backup needs;
//  * the C API's messages naming the limit.
// The docs give no way to fail a chosen slab: the simulation fails the n-th
// call of a kind, so each slab is reached by counting the calls a clean first
// sleep of the same program makes, and failing each of them in turn.
// Suite 'sim' (test/sova_tests).
#include "capi/capi_test_util.hpp"
#include "sleep/first_sleep_scenario.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>
#include <sova/sova.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace sova;
using namespace sova::first_sleep;

namespace {

// About 92 MiB of live blocks in groups more than 1 MiB apart: a backup of
// two slabs or more ("64 MiB to 1 GiB each") and several copies.
const std::vector<std::size_t> kLayout = {40 * kMiB + 4100, 33 * kMiB + 777, 17 * kMiB + 1, 64 * kKiB,
                                          64 * kKiB,        5000,            2 * kMiB};
// What a sleep that backs up more than the first adds.
const std::vector<std::size_t> kMore = {90 * kMiB + 12, 45 * kMiB};

/// A simulation, a pool on it and the program's blocks, patterns written.
struct Setup {
  std::unique_ptr<SimDriver> sim;
  std::unique_ptr<Pool> pool;
  cudaStream_t s = nullptr;
  std::vector<Block> blocks;

  explicit Setup(std::size_t budget = 0, std::size_t pinned_limit = std::size_t{64} << 30) {
    SimConfig cfg;
    cfg.total_memory = std::size_t{512} << 20;
    cfg.pinned_host_memory = pinned_limit;
    sim = std::make_unique<SimDriver>(cfg);
    PoolOptions options;
    options.driver = sim.get();
    options.release_threshold = UINT64_MAX;
    options.sleep_host_budget = budget;
    pool = std::make_unique<Pool>(options);
    s = sim->create_stream();
    add(kLayout, 100);
  }
  ~Setup() {
    sim->stream_synchronize(s);
    for (const Block& b : blocks) pool->deallocate(b.ptr, s);
    sim->stream_synchronize(s);
    pool.reset();
    sim->destroy_stream(s);
  }
  /// Allocates `sizes`, each followed by a 3 MiB block freed again (a gap).
  void add(const std::vector<std::size_t>& sizes, std::uint32_t first_tag) {
    std::vector<void*> gaps;
    for (std::size_t n : sizes) {
      Block b;
      b.ptr = pool->allocate(n, s);
      b.bytes = n;
      b.tag = first_tag++;
      fill_on(*sim, s, b);
      blocks.push_back(b);
      gaps.push_back(pool->allocate(3 * kMiB, s));
    }
    for (void* g : gaps) pool->deallocate(g, s);
    REQUIRE(sim->stream_synchronize(s) == cudaSuccess);
  }
  std::size_t wrong() {
    REQUIRE(sim->stream_synchronize(s) == cudaSuccess);
    return wrong_in(blocks);
  }
  /// A full cycle with backup that must succeed, contents checked after.
  void cycle() {
    REQUIRE(pool->sleep(SleepMode::backup, s) == cudaSuccess);
    CHECK(pool->sleep_pin_refusal() == SleepPinRefusal::none);
    REQUIRE(pool->wake(s) == cudaSuccess);
    CHECK(wrong() == 0);
  }
};

/// What a clean first sleep of the program asked of the host and the copies.
struct Counts {
  std::size_t maps = 0, registers = 0, copies = 0, held = 0;
};

Counts clean_sleep(Setup& x) {
  const SimCounters a = x.sim->counters();
  REQUIRE(x.pool->sleep(SleepMode::backup, x.s) == cudaSuccess);
  const SimCounters b = x.sim->counters();
  Counts c;
  c.maps = b.of(SimCall::host_map) - a.of(SimCall::host_map);
  c.registers = b.of(SimCall::host_register_on) - a.of(SimCall::host_register_on);
  c.copies = b.of(SimCall::memcpy_async) - a.of(SimCall::memcpy_async);
  c.held = x.pool->stats().sleep_host_bytes;
  REQUIRE(x.pool->wake(x.s) == cudaSuccess);
  CHECK(x.wrong() == 0);
  return c;
}

enum class Kind { map, lock, copy };
const char* kind_name(Kind k) { return k == Kind::map ? "host_map" : k == Kind::lock ? "host_register_on" : "memcpy_async"; }

void arm(SimDriver& sim, Kind kind, int n) {
  if (kind == Kind::map) sim.fail_host_map_at(n, cudaErrorMemoryAllocation);
  if (kind == Kind::lock) sim.fail_host_register_at(n, cudaErrorMemoryAllocation);
  if (kind == Kind::copy) sim.fail_memcpy_at(n, cudaErrorUnknown);
}

/// A sleep failing at the armed call: awake as it was (docs: "A slab refused
/// fails the sleep before anything is released: the pool stays awake with
/// every byte intact, what that sleep mapped and locked is unlocked and
/// unmapped, and the host memory held before is kept"; for a copy: "Before
/// the release (host memory, events, copies): awake, contents intact, and
/// the host memory held as before").
void expect_failed_sleep_changed_nothing(Setup& x, Kind kind) {
  const PoolStats before = x.pool->stats();
  const SimCounters sim_before = x.sim->counters();
  const cudaError_t rc = x.pool->sleep(SleepMode::backup, x.s);
  CHECK(rc != cudaSuccess);
  if (kind == Kind::map) CHECK(rc == cudaErrorMemoryAllocation);
  CHECK_FALSE(x.pool->asleep());
  if (kind == Kind::map) CHECK(x.pool->sleep_pin_refusal() == SleepPinRefusal::host_memory);
  if (kind == Kind::lock) CHECK(x.pool->sleep_pin_refusal() == SleepPinRefusal::lock);
  const PoolStats after = x.pool->stats();
  CHECK(after.sleep_host_bytes == before.sleep_host_bytes);
  CHECK(after.asleep_bytes == 0);
  CHECK(after.reserved_current == before.reserved_current);
  CHECK(after.live_blocks == before.live_blocks);
  const SimCounters c = x.sim->counters();
  CHECK(c.pinned_host_bytes == sim_before.pinned_host_bytes);
  CHECK(c.host_mapped_bytes == sim_before.host_mapped_bytes);
  CHECK(c.physical_bytes == sim_before.physical_bytes);  // nothing released
  CHECK(c.unmaps == sim_before.unmaps);
  CHECK(x.wrong() == 0);
  // "allocations served as before"
  void* p = nullptr;
  CHECK(x.pool->try_allocate(&p, kMiB, x.s) == cudaSuccess);
  CHECK(x.pool->try_deallocate(p, x.s) == cudaSuccess);
}

}  // namespace

TEST_CASE("scenario: a refusal at each slab of a first sleep leaves the pool awake and every byte intact",
          "[scenario][sleep][first_sleep][slab_failures]") {
  Counts clean;
  {
    Setup twin;
    clean = clean_sleep(twin);
  }
  INFO("a clean first sleep: " << clean.maps << " mappings, " << clean.registers << " registrations, "
                               << clean.copies << " copies, " << clean.held << " bytes held");
  // "pins each slab of the backup in place: mapped, touched, registered"
  REQUIRE(clean.maps >= 2);  // several 64 MiB slabs: "64 MiB to 1 GiB each"
  CHECK(clean.registers == clean.maps);
  std::size_t live = 0;
  for (std::size_t n : kLayout) live += n;
  CHECK(clean.held >= live);
  REQUIRE(clean.copies >= 1);

  for (Kind kind : {Kind::map, Kind::lock, Kind::copy}) {
    const std::size_t n = kind == Kind::map ? clean.maps : kind == Kind::lock ? clean.registers : clean.copies;
    for (std::size_t k = 1; k <= n; ++k) {
      INFO("the " << k << "-th " << kind_name(kind) << " call of " << n << " fails");
      Setup x;
      arm(*x.sim, kind, static_cast<int>(k));
      expect_failed_sleep_changed_nothing(x, kind);
      CHECK(x.pool->stats().sleep_host_bytes == 0);
      CHECK(x.sim->counters().pinned_host_bytes == 0);
      CHECK(x.sim->counters().host_mapped_bytes == 0);
      // The retry pins and sleeps as a first sleep does, and keeps it.
      x.cycle();
      CHECK(x.pool->stats().sleep_host_bytes == clean.held);
      x.cycle();
    }
  }
}

TEST_CASE("scenario: a refusal at each new slab of a sleep backing up more than any before keeps what was held",
          "[scenario][sleep][first_sleep][slab_failures]") {
  Counts first, grown;
  {
    Setup twin;
    first = clean_sleep(twin);
    twin.add(kMore, 500);
    grown = clean_sleep(twin);
  }
  INFO("first sleep held " << first.held << " bytes; the bigger one mapped " << grown.maps << " slabs more, held "
                           << grown.held);
  REQUIRE(grown.maps >= 1);
  CHECK(grown.held > first.held);
  for (Kind kind : {Kind::map, Kind::lock}) {
    for (std::size_t k = 1; k <= grown.maps; ++k) {
      INFO("the " << k << "-th " << kind_name(kind) << " call of the bigger sleep fails");
      Setup x;
      x.cycle();
      const std::uint64_t held = x.pool->stats().sleep_host_bytes;
      CHECK(held == first.held);
      x.add(kMore, 500);
      arm(*x.sim, kind, static_cast<int>(k));
      expect_failed_sleep_changed_nothing(x, kind);
      CHECK(x.pool->stats().sleep_host_bytes == held);
      CHECK(x.sim->counters().pinned_host_bytes == held);
      x.cycle();
      CHECK(x.pool->stats().sleep_host_bytes == grown.held);
    }
  }
}

TEST_CASE("scenario: reserve_sleep_backup refused at each slab holds what it held before",
          "[scenario][sleep][first_sleep][slab_failures]") {
  std::size_t maps = 0;
  std::uint64_t reserved = 0;
  {
    Setup twin;
    reserved = twin.pool->stats().reserved_current;
    const std::size_t m0 = calls(*twin.sim, SimCall::host_map);
    REQUIRE(twin.pool->reserve_sleep_backup(reserved) == cudaSuccess);
    maps = calls(*twin.sim, SimCall::host_map) - m0;
    CHECK(twin.pool->stats().sleep_host_bytes >= reserved);
    // "A sleep backing up no more than the bytes reserved pins nothing"
    const std::size_t pins = pin_calls(*twin.sim);
    twin.cycle();
    CHECK(pin_calls(*twin.sim) == pins);
  }
  REQUIRE(maps >= 2);
  for (Kind kind : {Kind::map, Kind::lock}) {
    for (std::size_t k = 1; k <= maps; ++k) {
      INFO("the " << k << "-th " << kind_name(kind) << " call of " << maps << " fails");
      Setup x;
      arm(*x.sim, kind, static_cast<int>(k));
      // "All or nothing: on failure (cudaErrorMemoryAllocation) the memory held is as before"
      CHECK(x.pool->reserve_sleep_backup(reserved) == cudaErrorMemoryAllocation);
      CHECK(x.pool->sleep_pin_refusal() == (kind == Kind::map ? SleepPinRefusal::host_memory : SleepPinRefusal::lock));
      CHECK(x.pool->stats().sleep_host_bytes == 0);
      CHECK(x.sim->counters().pinned_host_bytes == 0);
      CHECK(x.sim->counters().host_mapped_bytes == 0);
      CHECK(x.wrong() == 0);
      REQUIRE(x.pool->reserve_sleep_backup(reserved) == cudaSuccess);
      CHECK(x.pool->sleep_pin_refusal() == SleepPinRefusal::none);
      x.cycle();
    }
  }
}

TEST_CASE("scenario: the locked-memory limit reached part-way through a first sleep",
          "[scenario][sleep][first_sleep]") {
  // SimConfig::pinned_host_memory: what host_register_on locks in all, as a
  // locked-memory limit (ulimit -l) allows; here below the backup.
  Setup x(0, std::size_t{80} << 20);  // one slab fits, not the backup
  const std::size_t registers0 = x.sim->counters().host_registers;
  expect_failed_sleep_changed_nothing(x, Kind::lock);
  CHECK(x.sim->counters().host_registers > registers0);  // part-way: some slabs were locked, then given back
  CHECK(x.sim->counters().pinned_host_bytes == 0);
  CHECK(x.pool->stats().sleep_host_bytes == 0);
  // A sleep without backup needs no host memory and is never refused.
  REQUIRE(x.pool->sleep(SleepMode::discard, x.s) == cudaSuccess);
  CHECK(x.pool->asleep());
  REQUIRE(x.pool->wake(x.s) == cudaSuccess);
  REQUIRE(x.sim->stream_synchronize(x.s) == cudaSuccess);
  // A smaller backup within the limit goes through.
  for (std::size_t i = 0; i + 1 < x.blocks.size(); ++i) x.pool->deallocate(x.blocks[i].ptr, x.s);
  x.blocks.erase(x.blocks.begin(), x.blocks.end() - 1);  // the last, 2 MiB
  x.blocks.back().tag = 42;
  fill_on(*x.sim, x.s, x.blocks.back());
  x.cycle();
}

TEST_CASE("scenario: host budgets below, at and above what a first sleep needs",
          "[scenario][sleep][first_sleep][budget]") {
  Counts clean;
  std::size_t live = 0;
  {
    Setup twin;
    live = live_bytes(twin.blocks);
    clean = clean_sleep(twin);
  }
  const std::size_t need = clean.held;
  INFO("live " << live << " bytes, a first sleep without a budget holds " << need);

  auto refused = [](Setup& x, std::size_t budget) {
    const SimCounters c0 = x.sim->counters();
    CHECK(x.pool->sleep(SleepMode::backup, x.s) == cudaErrorMemoryAllocation);
    CHECK_FALSE(x.pool->asleep());
    // "refused before anything is copied or released"
    CHECK(x.sim->counters().copies == c0.copies);
    CHECK(x.sim->counters().unmaps == c0.unmaps);
    CHECK(x.sim->counters().physical_bytes == c0.physical_bytes);
    CHECK(x.pool->stats().sleep_budget_refusals == 1);
    CHECK(x.pool->stats().sleep_host_budget == budget);
    CHECK(x.pool->stats().sleep_host_bytes <= budget);
    CHECK(x.wrong() == 0);
    void* p = nullptr;
    CHECK(x.pool->try_allocate(&p, kMiB, x.s) == cudaSuccess);  // "allocations served as before"
    CHECK(x.pool->try_deallocate(p, x.s) == cudaSuccess);
    // A sleep without backup is never refused.
    REQUIRE(x.pool->sleep(SleepMode::discard_zeroed, x.s) == cudaSuccess);
    REQUIRE(x.pool->wake(x.s) == cudaSuccess);
    for (Block& b : x.blocks) b.expect = Block::Expect::zero;
    CHECK(x.wrong() == 0);
  };

  SECTION("below the live bytes: refused, nothing changed") {
    Setup x(live - 1);
    refused(x, live - 1);
  }
  SECTION("a byte below what it holds without a budget: refused, or it fits under the cap") {
    Setup x(need - 1);
    const cudaError_t rc = x.pool->sleep(SleepMode::backup, x.s);
    if (rc == cudaSuccess) {
      CHECK(x.pool->stats().sleep_host_bytes <= need - 1);  // "caps the pinned host memory"
      REQUIRE(x.pool->wake(x.s) == cudaSuccess);
      CHECK(x.wrong() == 0);
    } else {
      CHECK(rc == cudaErrorMemoryAllocation);
      CHECK(x.pool->stats().sleep_budget_refusals == 1);
      CHECK_FALSE(x.pool->asleep());
      CHECK(x.wrong() == 0);
    }
  }
  SECTION("at what it holds without a budget: it sleeps, holding exactly the budget") {
    Setup x(need);
    x.cycle();
    CHECK(x.pool->stats().sleep_host_bytes == need);
    CHECK(x.pool->stats().sleep_budget_refusals == 0);
    x.cycle();
  }
  SECTION("above: it sleeps, holding what it needs and no more") {
    Setup x(2 * need);
    x.cycle();
    CHECK(x.pool->stats().sleep_host_bytes == need);
    CHECK(x.sim->counters().pinned_host_bytes == need);
    // Growing past the budget later is refused, with what is held kept.
    x.add({std::size_t{180} << 20}, 800);
    refused(x, 2 * need);
    CHECK(x.pool->stats().sleep_host_bytes == need);
  }
  SECTION("reservations beyond the budget are refused whatever the size, nothing pinned") {
    Setup x(need);
    for (std::size_t bytes : {need + 1, std::size_t{1} << 40, SIZE_MAX}) {
      INFO("reserve " << bytes);
      CHECK(x.pool->reserve_sleep_backup(bytes) == cudaErrorMemoryAllocation);
      CHECK(x.pool->stats().sleep_host_bytes == 0);
    }
    CHECK(x.pool->stats().sleep_budget_refusals == 3);
    CHECK(x.sim->counters().pinned_host_bytes == 0);
    CHECK(x.sim->counters().host_mapped_bytes == 0);
    x.cycle();
  }
  SECTION("without a budget, a reservation of 64 TiB or more is refused, nothing pinned") {
    Setup x;
    CHECK(x.pool->reserve_sleep_backup(std::size_t{64} << 40) == cudaErrorMemoryAllocation);
    CHECK(x.pool->reserve_sleep_backup(SIZE_MAX) == cudaErrorMemoryAllocation);
    CHECK(x.pool->stats().sleep_host_bytes == 0);
    CHECK(x.sim->counters().pinned_host_bytes == 0);
    x.cycle();
  }
}

TEST_CASE("scenario: the C API's message names the limit a first sleep hit",
          "[scenario][sleep][first_sleep][capi]") {
  using namespace sova::capi_test;
  SimDriver& d = sim();
  auto with_pool = [&](std::size_t budget, const std::function<void(sovaMemPool_t, cudaStream_t)>& body) {
    sovaMemPoolProps props = props_on(0);
    props.sleepHostBudget = budget;
    ScopedPool pool(props);
    ScopedStream s;
    void* p = nullptr;
    const std::size_t n = 24 * MiB + 333;
    REQUIRE(sovaMallocFromPoolAsync(&p, n, pool, s) == cudaSuccess);
    fill_on(s, p, n, 0x5a);
    body(pool, s);
    int asleep = 1;
    REQUIRE(sovaMemPoolIsAsleep(pool, &asleep) == cudaSuccess);
    CHECK(asleep == 0);
    s.synchronize();
    CHECK(holds(p, n, 0x5a));
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  };
  SECTION("the lock: ulimit -l") {
    with_pool(0, [&](sovaMemPool_t pool, cudaStream_t s) {
      d.fail_host_register_at(1, cudaErrorMemoryAllocation);
      CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, s) != cudaSuccess);
      const std::string msg = sovaGetLastErrorMessage();
      INFO(msg);
      CHECK(msg.find("cudaHostRegister") != std::string::npos);
      CHECK(msg.find("ulimit -l") != std::string::npos);
      CHECK(msg.find("MiB free") != std::string::npos);
    });
  }
  SECTION("the mapping: host memory") {
    with_pool(0, [&](sovaMemPool_t pool, cudaStream_t s) {
      d.fail_host_map_at(1, cudaErrorMemoryAllocation);
      CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, s) == cudaErrorMemoryAllocation);
      const std::string msg = sovaGetLastErrorMessage();
      INFO(msg);
      CHECK(msg.find("the host refused memory for the backup") != std::string::npos);
      CHECK(msg.find("mmap") != std::string::npos);
    });
  }
  SECTION("the budget") {
    with_pool(8 * MiB, [&](sovaMemPool_t pool, cudaStream_t s) {
      CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, s) == cudaErrorMemoryAllocation);
      const std::string msg = sovaGetLastErrorMessage();
      INFO(msg);
      CHECK(msg.find("budget") != std::string::npos);
      CHECK(msg.find("sleepHostBudget 8388608 bytes") != std::string::npos);
      CHECK(msg.find("the pool is awake as it was") != std::string::npos);
    });
  }
}
