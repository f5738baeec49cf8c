// [scenario][sleep][first_sleep] The first sleep of a pool, as a user meets it,
// written from docs/sleep-wake.md ("What sleep and wake do", "The first sleep,
// and pinning ahead", "No drift across cycles") and the public headers alone:
//  * seeded random programs of allocations, pattern writes, frees before and
//    while asleep, sleeps in the three modes, wakes read on the wake's stream
//    and from the host, reuse on another stream right after wake, releases of
//    the kept backup, budgets and pin-ahead, every kept byte checked;
//  * keep or release the backup after wake, the host memory held read from
//    PoolStats::sleep_host_bytes and the simulation's pinned bytes;
//  * the first sleep's pinning pipelined with its copies, in stream order.
// Suite 'sim' (test/sova_tests).
#include "sleep/first_sleep_scenario.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::first_sleep;

namespace {

const char* mode_name(SleepMode m) {
  switch (m) {
    case SleepMode::backup: return "backup";
    case SleepMode::discard: return "discard";
    case SleepMode::discard_zeroed: return "discard_zeroed";
  }
  return "?";
}

/// One seeded program on its own simulation and pool. Every step's outcome is
/// checked against what docs/sleep-wake.md promises; the seed is in every
/// failure's message.
void run_program(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  auto chance = [&](unsigned percent) { return pick(100) < percent; };

  SimConfig cfg;
  cfg.total_memory = std::size_t{512} << 20;
  SimDriver sim(cfg);
  const bool keep_all = chance(50);  // release threshold UINT64_MAX: the release worker gives nothing back
  const bool pin_ahead = chance(35);
  const std::size_t budget = chance(30) ? std::size_t{96 + 2 * pick(40)} << 20 : 0;
  const bool late_copies = chance(30);
  INFO("seed " << seed << ": threshold " << (keep_all ? "UINT64_MAX" : "0") << ", pin-ahead " << pin_ahead
               << ", budget " << budget << ", late copies " << late_copies);
  if (late_copies) sim.delay_copies(std::chrono::microseconds(300));

  PoolOptions options;
  options.driver = &sim;
  options.release_threshold = keep_all ? UINT64_MAX : 0;
  options.sleep_pin_ahead = pin_ahead;
  options.sleep_host_budget = budget;
  std::vector<Block> live;
  {
    Pool pool(options);
    const cudaStream_t s0 = sim.create_stream();
    const cudaStream_t s1 = sim.create_stream();
    std::uint32_t next_tag = static_cast<std::uint32_t>(seed * 1000 + 1);
    std::uint64_t refusals = 0;
    int sleeps = 0, wakes = 0, frees_asleep = 0;

    auto new_size = [&]() -> std::size_t {
      switch (pick(4)) {
        case 0: return 512 + pick(64 * kKiB);
        case 1: return 64 * kKiB + pick(4 * kMiB);
        case 2: return 4 * kMiB + pick(28 * kMiB);
        default: return (1 + pick(8)) * 2 * kMiB + (chance(50) ? 0 : 1 + pick(4096));  // whole granules, or a few bytes past
      }
    };
    auto allocate = [&](cudaStream_t s) {
      const std::size_t n = new_size();
      if (live_bytes(live) + n > std::size_t{200} << 20) return;
      Block b;
      b.ptr = pool.allocate(n, s);
      b.bytes = n;
      b.tag = next_tag++;
      fill_on(sim, s, b);
      live.push_back(b);
    };
    // Frees on the stream that wrote the block: s0 or s1, whichever; the
    // writes on s1 are synchronized before each sleep and each free on s0.
    auto free_one = [&](cudaStream_t s) {
      if (live.empty()) return;
      const std::size_t i = pick(live.size());
      pool.deallocate(live[i].ptr, s);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    };
    auto host_check = [&](const char* when) {
      REQUIRE(sim.stream_synchronize(s0) == cudaSuccess);
      REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
      INFO(when << ", after " << sleeps << " sleeps and " << wakes << " wakes");
      CHECK(wrong_in(live) == 0);
    };
    auto check_held = [&] {
      const PoolStats st = pool.stats();
      if (budget != 0) CHECK(st.sleep_host_bytes <= budget);  // "caps the pinned host memory the pool holds"
    };

    const int steps = 40;
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step);
      const unsigned r = static_cast<unsigned>(pick(100));
      if (r < 40) {
        allocate(chance(70) ? s0 : s1);
      } else if (r < 55) {
        REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
        free_one(s0);
      } else if (r < 60) {
        pool.trim_to(0);
      } else if (r < 65) {
        // Give the kept backup back while awake: "unregisters and unmaps
        // every slab: the process's resident memory drops by it".
        REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
        REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
        const PoolStats st = pool.stats();
        CHECK(st.sleep_host_bytes == 0);
        CHECK(st.sleep_pin_ahead_bytes == 0);
        CHECK(sim.counters().pinned_host_bytes == 0);
        CHECK(sim.counters().host_mapped_bytes == 0);
      } else {
        // A sleep cycle. Every stream that used the memory is ordered before
        // the sleep's stream ("Rules for the caller"): s1 synchronized, s0's
        // writes still queued, the sleep after them.
        const SleepMode mode = pick(10) < 6 ? SleepMode::backup
                               : chance(50) ? SleepMode::discard
                                            : SleepMode::discard_zeroed;
        INFO("sleep " << mode_name(mode));
        REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
        const PoolStats before = pool.stats();
        const SimCounters sim_before = sim.counters();
        const cudaError_t rc = pool.sleep(mode, s0);
        if (rc == cudaErrorMemoryAllocation && mode == SleepMode::backup && budget != 0) {
          // "refused before anything is copied or released: ... the pool
          // awake with its contents, allocations served as before"
          ++refusals;
          CHECK_FALSE(pool.asleep());
          CHECK(pool.stats().sleep_budget_refusals == refusals);
          CHECK(sim.counters().copies == sim_before.copies);
          CHECK(sim.counters().unmaps == sim_before.unmaps);
          host_check("after a sleep the budget refused");
          check_held();
          continue;
        }
        REQUIRE(rc == cudaSuccess);
        ++sleeps;
        CHECK(pool.asleep());
        PoolStats st = pool.stats();
        // "every physical chunk is unmapped and released": the pool is the
        // simulation's only user of device memory.
        CHECK(sim.counters().physical_bytes == 0);
        if (!live.empty()) CHECK(st.asleep_bytes > 0);  // live blocks lie on physical memory
        // "physical bytes sleep gave back": all it held, with no release
        // worker to give any back before
        if (keep_all) CHECK(st.asleep_bytes == before.reserved_current);
        if (mode == SleepMode::backup) {
          CHECK(st.sleep_host_bytes >= live_bytes(live));  // the live bytes are in it
        } else if (!pin_ahead) {
          // "A sleep without backup needs no host memory ... keeps the host
          // memory already pinned"
          CHECK(st.sleep_host_bytes == before.sleep_host_bytes);
        }
        // Pinned host memory held is the backup's slabs: the pool is the
        // simulation's only user ("however pinned"); asleep, pin-ahead pins nothing.
        CHECK(sim.counters().pinned_host_bytes == st.sleep_host_bytes);
        check_held();

        // While asleep: allocations refused, sleeping again does nothing,
        // the backup cannot be released, frees are accepted and final.
        void* p = nullptr;
        CHECK(pool.try_allocate(&p, 4096, chance(50) ? s0 : s1) == cudaErrorNotPermitted);
        CHECK(pool.sleep(mode, s0) == cudaSuccess);
        CHECK(pool.asleep());
        CHECK(pool.release_sleep_host_memory() == cudaErrorNotPermitted);
        CHECK(pool.stats().sleep_host_bytes == st.sleep_host_bytes);
        const std::size_t frees = live.empty() ? 0 : pick(std::min<std::size_t>(live.size(), 4) + 1);
        for (std::size_t i = 0; i < frees; ++i) {
          free_one(chance(50) ? s0 : s1);
          ++frees_asleep;
        }
        CHECK(pool.stats().live_blocks == live.size());

        const std::uint64_t host_before_wake = pool.stats().sleep_host_bytes;
        REQUIRE(pool.wake(s0) == cudaSuccess);
        ++wakes;
        CHECK_FALSE(pool.asleep());
        st = pool.stats();
        CHECK(st.asleep_bytes == 0);
        if (!pin_ahead) CHECK(st.sleep_host_bytes == host_before_wake);  // kept across cycles
        // "the pool's reserved bytes after wake are what they were before sleep"
        if (keep_all) CHECK(st.reserved_current == before.reserved_current);

        for (Block& b : live) {
          if (mode == SleepMode::discard_zeroed) b.expect = Block::Expect::zero;
          if (mode == SleepMode::discard) b.expect = Block::Expect::undefined;
        }
        // Reuse right after wake on the other stream, while the restore may
        // still run: the blocks freed while asleep are free memory, which
        // the restore must not write ("Wake writes the live blocks' bytes
        // and nothing else").
        const std::size_t reuses = pick(3);
        for (std::size_t i = 0; i < reuses; ++i) allocate(s1);
        if (chance(30)) pool.trim_to(0);
        // Read the contents on wake's stream (a kernel ordered after wake),
        // or from the host after synchronizing it.
        if (chance(50)) {
          std::atomic<std::size_t> wrong{0};
          std::vector<Block> kept;
          for (const Block& b : live)
            if (b.expect != Block::Expect::undefined) kept.push_back(b);
          // s1's new blocks are written on s1: check them after s1.
          REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
          check_on(sim, s0, kept, &wrong);
          REQUIRE(sim.stream_synchronize(s0) == cudaSuccess);
          INFO("read on wake's stream after " << mode_name(mode));
          CHECK(wrong.load() == 0);
        } else {
          host_check("read from the host after wake");
        }
        // Discarded contents are written anew before they count as kept.
        for (Block& b : live)
          if (b.expect != Block::Expect::pattern) {
            b.tag = next_tag++;
            fill_on(sim, s0, b);
          }
        check_held();
      }
    }
    host_check("at the end");
    REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
    for (const Block& b : live) pool.deallocate(b.ptr, s0);
    live.clear();
    REQUIRE(sim.stream_synchronize(s0) == cudaSuccess);
    UNSCOPED_INFO("seed " << seed << ": " << sleeps << " sleeps, " << frees_asleep << " frees while asleep");
    sim.destroy_stream(s0);
    sim.destroy_stream(s1);
  }
  // Destroying the pool gives everything back: device memory, the pinned
  // slabs, their mappings ("unregisters and unmaps every slab").
  const SimCounters end = sim.counters();
  CHECK(end.physical_bytes == 0);
  CHECK(end.pinned_host_bytes == 0);
  CHECK(end.host_mapped_bytes == 0);
}

/// A pool holding `sizes` (patterns written and synchronized), each followed
/// by a 3 MiB block freed again, so that the backup is several groups.
std::vector<Block> fill_pool(Pool& pool, SimDriver& sim, cudaStream_t s, const std::vector<std::size_t>& sizes,
                             std::uint32_t first_tag) {
  std::vector<Block> blocks;
  std::vector<void*> gaps;
  for (std::size_t n : sizes) {
    Block b;
    b.ptr = pool.allocate(n, s);
    b.bytes = n;
    b.tag = first_tag++;
    fill_on(sim, s, b);
    blocks.push_back(b);
    gaps.push_back(pool.allocate(3 * kMiB, s));
  }
  for (void* g : gaps) pool.deallocate(g, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  return blocks;
}

const std::vector<std::size_t> kLayout = {40 * kMiB + 4100, 33 * kMiB + 777, 70 * kMiB, 17 * kMiB + 1,
                                          64 * kKiB,        64 * kKiB,       5000,      2 * kMiB};

}  // namespace

TEST_CASE("scenario: the byte check finds a byte lost, a block shifted and a tail byte wrong",
          "[scenario][sleep][first_sleep]") {
  // The checks below can fail: what they count is every byte off the pattern.
  std::vector<unsigned char> a(4 * kKiB + 5);
  write_pattern(a.data(), a.size(), 77);
  CHECK(wrong_bytes(a.data(), a.size(), 77) == 0);
  CHECK(wrong_bytes(a.data(), a.size(), 78) > a.size() / 2);  // another block's pattern
  a[1000] ^= 1;
  CHECK(wrong_bytes(a.data(), a.size(), 77) == 1);
  a[1000] ^= 1;
  a.back() ^= 0x80;  // the last byte of an odd-sized block
  CHECK(wrong_bytes(a.data(), a.size(), 77) == 1);
  std::vector<unsigned char> shifted(a.size() + 8);
  write_pattern(shifted.data() + 8, a.size(), 77);  // restored 8 bytes off
  CHECK(wrong_bytes(shifted.data(), a.size(), 77) > a.size() / 2);
  std::vector<unsigned char> z(100, 0);
  CHECK(nonzero_bytes(z.data(), z.size()) == 0);
  z[99] = 1;
  CHECK(nonzero_bytes(z.data(), z.size()) == 1);
}

TEST_CASE("scenario: random programs of allocations, frees and sleeps keep every byte they promise",
          "[scenario][sleep][first_sleep]") {
  for (std::uint64_t seed : {1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233}) {
    INFO("seed " << seed << " (rerun this case to reproduce: the program is a function of the seed)");
    run_program(seed);
  }
}

TEST_CASE("scenario: after wake the backup is kept for the next cycle, or given back on request",
          "[scenario][sleep][first_sleep]") {
  SimConfig cfg;
  cfg.total_memory = std::size_t{512} << 20;
  SimDriver sim(cfg);
  PoolOptions options;
  options.driver = &sim;
  options.release_threshold = UINT64_MAX;
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();
  std::vector<Block> blocks = fill_pool(pool, sim, s, kLayout, 7000);
  const std::size_t live = live_bytes(blocks);

  // A plain pool pins nothing before its first sleep ("Defaults").
  CHECK(pool.stats().sleep_host_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);

  // The first sleep pins its backup.
  const std::size_t pins0 = pin_calls(sim);
  REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
  CHECK(pin_calls(sim) > pins0);
  const std::uint64_t held = pool.stats().sleep_host_bytes;
  CHECK(held >= live);
  CHECK(sim.counters().pinned_host_bytes == held);
  REQUIRE(pool.wake(s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(wrong_in(blocks) == 0);

  SECTION("kept: later sleeps of the same contents pin nothing and hold the same host memory") {
    CHECK(pool.stats().sleep_host_bytes == held);  // kept after wake, by default
    for (int cycle = 0; cycle < 5; ++cycle) {
      INFO("cycle " << cycle);
      for (Block& b : blocks) {
        b.tag += 100;
        fill_on(sim, s, b);
      }
      const std::size_t pins = pin_calls(sim);
      REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
      CHECK(pin_calls(sim) == pins);  // "a thousand cycles pin it once"
      CHECK(pool.stats().sleep_host_bytes == held);
      REQUIRE(pool.wake(s) == cudaSuccess);
      REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
      CHECK(wrong_in(blocks) == 0);
    }
    CHECK(sim.counters().pinned_host_bytes == held);
  }

  SECTION("released: nothing held after the release, and the next sleep pins again") {
    REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
    CHECK(pool.stats().sleep_host_bytes == 0);
    CHECK(sim.counters().pinned_host_bytes == 0);
    CHECK(sim.counters().host_mapped_bytes == 0);  // unmapped too, not only unregistered
    CHECK(pool.release_sleep_host_memory() == cudaSuccess);  // nothing to give back: still fine
    const std::size_t pins = pin_calls(sim);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    CHECK(pin_calls(sim) > pins);
    CHECK(pool.stats().sleep_host_bytes >= live);
    REQUIRE(pool.wake(s) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(wrong_in(blocks) == 0);
  }

  SECTION("released right after wake, the restore still running: it waits for the restore") {
    // "it waits on the host for the pool's own copies (the restore) and then
    // unregisters and unmaps every slab": with every copy held back, a
    // release that did not wait would free the host memory under the copies.
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    sim.delay_copies(std::chrono::microseconds(20000));
    REQUIRE(pool.wake(s) == cudaSuccess);
    REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
    sim.delay_copies(std::chrono::microseconds(0));
    CHECK(pool.stats().sleep_host_bytes == 0);
    CHECK(sim.counters().pinned_host_bytes == 0);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(wrong_in(blocks) == 0);
  }

  SECTION("a bigger backup than any before pins only then, and the host memory never shrinks on its own") {
    std::vector<Block> more = fill_pool(pool, sim, s, {90 * kMiB, 30 * kMiB + 3}, 8000);
    const std::size_t pins = pin_calls(sim);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    CHECK(pin_calls(sim) > pins);
    const std::uint64_t bigger = pool.stats().sleep_host_bytes;
    CHECK(bigger >= live + live_bytes(more));
    CHECK(bigger > held);
    REQUIRE(pool.wake(s) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(wrong_in(blocks) == 0);
    CHECK(wrong_in(more) == 0);
    // Back to the smaller contents: nothing pinned, nothing given back.
    for (const Block& b : more) pool.deallocate(b.ptr, s);
    const std::size_t pins2 = pin_calls(sim);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    CHECK(pin_calls(sim) == pins2);
    CHECK(pool.stats().sleep_host_bytes == bigger);
    REQUIRE(pool.wake(s) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(wrong_in(blocks) == 0);
  }

  for (const Block& b : blocks) pool.deallocate(b.ptr, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("scenario: the first sleep's copies start while later slabs are still being pinned, in stream order",
          "[scenario][sleep][first_sleep][pipeline]") {
  // "each slab's copies start as soon as it is pinned: the copies of one
  // slab overlap the pinning of the others" and "a 1 GiB backup pins 16
  // slabs of 64 MiB" on "up to 8 threads": with every pin made slow, some
  // copies must be enqueued while some slabs are not yet registered.
  SimConfig cfg;
  cfg.total_memory = std::size_t{1280} << 20;
  SimDriver sim(cfg);
  PoolOptions options;
  options.driver = &sim;
  options.release_threshold = UINT64_MAX;
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();
  std::vector<std::size_t> sizes(32, 32 * kMiB);  // 1 GiB of live blocks, back to back
  std::vector<Block> blocks;
  std::uint32_t tag = 9000;
  for (std::size_t n : sizes) {
    Block b;
    b.ptr = pool.allocate(n, s);
    b.bytes = n;
    b.tag = tag++;
    fill_on(sim, s, b);
    blocks.push_back(b);
  }
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);

  // The last writes are queued behind a busy period on the sleep's stream:
  // the backup must hold them ("ordered after the work the caller submitted
  // before it on that stream").
  sim.delay(s, std::chrono::microseconds(30000));
  for (std::size_t i = 0; i < blocks.size(); i += 5) {
    blocks[i].tag += 500;
    fill_on(sim, s, blocks[i]);
  }

  sim.delay_host_pins(std::chrono::microseconds(60000));
  const SimCounters c0 = sim.counters();
  std::atomic<bool> done{false};
  bool overlapped = false;  // a copy enqueued while a slab was still unregistered
  std::size_t registers_at_first_copy = 0;
  std::thread watcher([&] {
    bool seen_copy = false;
    while (!done.load()) {
      const SimCounters c = sim.counters();
      const std::size_t copies = c.copies - c0.copies;
      const std::size_t regs = c.host_registers - c0.host_registers;
      if (copies > 0 && !seen_copy) {
        seen_copy = true;
        registers_at_first_copy = regs;
      }
      if (copies > 0 && regs < 16 && c.host_register_calls - c0.host_register_calls > regs) overlapped = true;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  const cudaError_t rc = pool.sleep(SleepMode::backup, s);
  done.store(true);
  watcher.join();
  sim.delay_host_pins(std::chrono::microseconds(0));
  REQUIRE(rc == cudaSuccess);
  const SimCounters c1 = sim.counters();
  const std::size_t slabs = c1.host_registers - c0.host_registers;
  INFO("slabs registered " << slabs << ", registered when the first copy was enqueued "
                           << registers_at_first_copy);
  CHECK(slabs == 16);  // "a 1 GiB backup pins 16 slabs of 64 MiB"
  CHECK(overlapped);
  CHECK(registers_at_first_copy < slabs);
  REQUIRE(pool.wake(s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(wrong_in(blocks) == 0);
  for (const Block& b : blocks) pool.deallocate(b.ptr, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}
