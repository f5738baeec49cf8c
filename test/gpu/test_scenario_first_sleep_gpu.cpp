// [gpu][scenario][sleep][first_sleep] The first sleep of a pool on the GPU,
// written from docs/sleep-wake.md and the public headers alone: the
// simulation's first-sleep scenarios (test/sleep/test_scenario_first_sleep*.cpp)
// at GPU scale. Seeded random programs of blocks up to 768 MiB and up to
// 4 GiB live: allocations, pattern writes by kernels, frees before and while
// asleep, sleeps in the three modes (the first of each pool pins its backup
// on the way), wakes read on the wake's stream and, after synchronizing it,
// on another stream, reuse on another stream right after wake; every kept
// byte checked by a kernel, zeroed blocks by a copy back. Then keep or
// release after wake, a budget below the backup, pin-ahead reaching its
// target with releases racing it. The GPU cannot inject pinning failures:
// the simulation's run covers those. Suite 'gpu' (test/sova_gpu_tests).
#include "gpu/scenario_checks.hpp"
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"
#include "support/test_device.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::scenario;

namespace {

struct GpuBlock {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint32_t tag = 0;
  enum class Expect { pattern, zero, undefined } expect = Expect::pattern;
};

/// The pool, two non-blocking streams and the blocks a program holds.
struct GpuProgram {
  int device = sova::test::test_device().ordinal();
  KeepDevice keep;
  std::unique_ptr<Pool> pool;
  Stream s0{device}, s1{device};
  std::vector<GpuBlock> live;
  std::uint32_t next_tag = 1;
  Counters wrong{1};
  std::vector<unsigned char> host;

  explicit GpuProgram(const PoolOptions& base) {
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    PoolOptions o = base;
    o.device = device;
    o.driver = &sova::test::test_device().driver();
    pool = std::make_unique<Pool>(o);
  }
  ~GpuProgram() {
    cudaStreamSynchronize(s0);
    cudaStreamSynchronize(s1);
    for (const GpuBlock& b : live) pool->try_deallocate(b.ptr, s0);
    cudaStreamSynchronize(s0);
    pool.reset();
  }
  GpuBlock& add(std::size_t n, cudaStream_t s) {
    GpuBlock b;
    b.ptr = pool->allocate(n, s);
    b.bytes = n;
    b.tag = next_tag++;
    fill(device, b.ptr, n, b.tag, s);
    live.push_back(b);
    return live.back();
  }
  void refill(GpuBlock& b, cudaStream_t s) {
    b.tag = next_tag++;
    b.expect = GpuBlock::Expect::pattern;
    fill(device, b.ptr, b.bytes, b.tag, s);
  }
  /// Enqueues the pattern checks of every block that holds one on `s`.
  void check_patterns_on(cudaStream_t s) {
    for (const GpuBlock& b : live)
      if (b.expect == GpuBlock::Expect::pattern) count_wrong(device, b.ptr, b.bytes, b.tag, wrong.slot(0), s);
  }
  /// Bytes of the zeroed blocks that are not zero, copied back on `s`.
  std::size_t nonzero_on(cudaStream_t s) {
    std::size_t bad = 0;
    host.resize(std::size_t{64} << 20);
    for (const GpuBlock& b : live) {
      if (b.expect != GpuBlock::Expect::zero) continue;
      for (std::size_t off = 0; off < b.bytes; off += host.size()) {
        const std::size_t n = std::min(host.size(), b.bytes - off);
        REQUIRE(cudaMemcpyAsync(host.data(), static_cast<char*>(b.ptr) + off, n, cudaMemcpyDeviceToHost, s) ==
                cudaSuccess);
        REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
        for (std::size_t i = 0; i < n; ++i) bad += host[i] != 0;
      }
    }
    return bad;
  }
  /// Every kept byte, checked on `s` after what is queued there.
  std::size_t wrong_bytes_on(cudaStream_t s) {
    wrong.zero();
    check_patterns_on(s);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    return static_cast<std::size_t>(wrong.sum()) + nonzero_on(s);
  }
  std::size_t live_bytes() const {
    std::size_t n = 0;
    for (const GpuBlock& b : live) n += b.bytes;
    return n;
  }
};

const char* mode_name(SleepMode m) {
  return m == SleepMode::backup ? "backup" : m == SleepMode::discard ? "discard" : "discard_zeroed";
}

void run_gpu_program(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  auto chance = [&](unsigned percent) { return pick(100) < percent; };
  PoolOptions options;
  options.release_threshold = chance(50) ? UINT64_MAX : 0;
  options.sleep_pin_ahead = chance(30);
  const bool keep_all = options.release_threshold == UINT64_MAX;
  INFO("seed " << seed << ": threshold " << (keep_all ? "UINT64_MAX" : "0") << ", pin-ahead "
               << options.sleep_pin_ahead);
  const std::size_t free_before_pool = free_memory(sova::test::test_device().ordinal());
  GpuProgram x(options);
  int sleeps = 0;

  auto new_size = [&]() -> std::size_t {
    switch (pick(4)) {
      case 0: return 512 + pick(256 * kKiB);
      case 1: return 256 * kKiB + pick(32 * kMiB);
      case 2: return 32 * kMiB + pick(256 * kMiB);
      default: return 256 * kMiB + pick(512 * kMiB) + (chance(50) ? 0 : 1 + pick(4096));
    }
  };
  auto free_one = [&](cudaStream_t s) {
    if (x.live.empty()) return;
    const std::size_t i = pick(x.live.size());
    x.pool->deallocate(x.live[i].ptr, s);
    x.live.erase(x.live.begin() + static_cast<std::ptrdiff_t>(i));
  };

  for (int step = 0; step < 36; ++step) {
    INFO("step " << step);
    const unsigned r = static_cast<unsigned>(pick(100));
    if (r < 40) {
      const std::size_t n = new_size();
      if (x.live_bytes() + n <= std::size_t{4} << 30) x.add(n, chance(70) ? x.s0 : x.s1);
    } else if (r < 55) {
      x.s1.sync();
      free_one(x.s0);
    } else if (r < 60) {
      x.s1.sync();
      REQUIRE(x.pool->release_sleep_host_memory() == cudaSuccess);
      CHECK(x.pool->stats().sleep_host_bytes == 0);
    } else {
      const SleepMode mode = pick(10) < 6 ? SleepMode::backup
                             : chance(50) ? SleepMode::discard
                                          : SleepMode::discard_zeroed;
      INFO("sleep " << mode_name(mode));
      x.s1.sync();  // every stream that used the memory ordered before the sleep's
      const PoolStats before = x.pool->stats();
      REQUIRE(x.pool->sleep(mode, x.s0) == cudaSuccess);
      ++sleeps;
      CHECK(x.pool->asleep());
      PoolStats st = x.pool->stats();
      if (!x.live.empty()) CHECK(st.asleep_bytes > 0);
      if (mode == SleepMode::backup) CHECK(st.sleep_host_bytes >= x.live_bytes());
      if (mode != SleepMode::backup && !options.sleep_pin_ahead)
        CHECK(st.sleep_host_bytes == before.sleep_host_bytes);
      // "the device's free memory while asleep is what it was before the
      // pool existed, within one granule per chunk": chunks are at most
      // 32 MiB (PoolOptions::max_chunk), granules 2 MiB.
      const std::size_t slack = (before.reserved_current / (32 * kMiB) + 16) * 2 * kMiB;
      CHECK(free_memory(x.device) + slack >= free_before_pool);

      void* p = nullptr;
      CHECK(x.pool->try_allocate(&p, 4096, x.s1) == cudaErrorNotPermitted);
      CHECK(x.pool->release_sleep_host_memory() == cudaErrorNotPermitted);
      const std::size_t frees = x.live.empty() ? 0 : pick(std::min<std::size_t>(x.live.size(), 3) + 1);
      for (std::size_t i = 0; i < frees; ++i) free_one(chance(50) ? x.s0 : x.s1);

      const std::uint64_t held = x.pool->stats().sleep_host_bytes;
      REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
      CHECK_FALSE(x.pool->asleep());
      st = x.pool->stats();
      CHECK(st.asleep_bytes == 0);
      if (!options.sleep_pin_ahead) CHECK(st.sleep_host_bytes == held);
      if (keep_all) CHECK(st.reserved_current == before.reserved_current);
      for (GpuBlock& b : x.live) {
        if (mode == SleepMode::discard_zeroed) b.expect = GpuBlock::Expect::zero;
        if (mode == SleepMode::discard) b.expect = GpuBlock::Expect::undefined;
      }
      // Reuse on the other stream right after wake, the restore maybe running.
      const std::size_t reuses = pick(3);
      for (std::size_t i = 0; i < reuses; ++i) {
        const std::size_t n = new_size();
        if (x.live_bytes() + n <= std::size_t{4} << 30) x.add(n, x.s1);
      }
      if (chance(30)) x.pool->trim_to(0);
      // Read on wake's stream (ordered after the restore), or on the other
      // stream after synchronizing wake's.
      x.s1.sync();
      cudaStream_t reader = x.s0;
      if (chance(50)) {
        x.s0.sync();
        reader = x.s1;
      }
      CHECK(x.wrong_bytes_on(reader) == 0);
      for (GpuBlock& b : x.live)
        if (b.expect != GpuBlock::Expect::pattern) x.refill(b, x.s0);
    }
  }
  x.s1.sync();
  CHECK(x.wrong_bytes_on(x.s0) == 0);
  UNSCOPED_INFO("seed " << seed << ": " << sleeps << " sleeps, " << x.live.size() << " blocks at the end");
}

}  // namespace

TEST_CASE("gpu scenario: random programs of allocations, frees and sleeps keep every byte they promise",
          "[gpu][scenario][sleep][first_sleep]") {
  for (std::uint64_t seed : {1, 2, 3, 4, 5, 6}) {
    INFO("seed " << seed << " (the program is a function of the seed)");
    run_gpu_program(seed);
  }
}

TEST_CASE("gpu scenario: after wake the backup is kept for the next cycle, or given back on request",
          "[gpu][scenario][sleep][first_sleep]") {
  PoolOptions options;
  options.release_threshold = UINT64_MAX;
  GpuProgram x(options);
  for (std::size_t n : {1 * kGiB + 4100, 512 * kMiB, 96 * kMiB + 777, 3 * kMiB}) x.add(n, x.s0);
  CHECK(x.pool->stats().sleep_host_bytes == 0);  // a plain pool pins nothing ahead
  REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
  const std::uint64_t held = x.pool->stats().sleep_host_bytes;
  CHECK(held >= x.live_bytes());
  REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
  CHECK(x.wrong_bytes_on(x.s0) == 0);

  SECTION("kept: the same host memory every cycle") {
    for (int cycle = 0; cycle < 3; ++cycle) {
      INFO("cycle " << cycle);
      for (GpuBlock& b : x.live) x.refill(b, x.s0);
      REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
      CHECK(x.pool->stats().sleep_host_bytes == held);
      REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
      CHECK(x.pool->stats().sleep_host_bytes == held);
      CHECK(x.wrong_bytes_on(x.s0) == 0);
    }
  }
  SECTION("released right after wake, the restore still queued behind a kernel") {
    REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
    busy(x.device, x.s0, 20000);  // wake's stream busy: the restore may run late
    REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
    REQUIRE(x.pool->release_sleep_host_memory() == cudaSuccess);  // waits for the restore
    CHECK(x.pool->stats().sleep_host_bytes == 0);
    CHECK(x.wrong_bytes_on(x.s0) == 0);
    // The next sleep pins again.
    REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
    CHECK(x.pool->stats().sleep_host_bytes >= x.live_bytes());
    REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
    x.s0.sync();  // the restore done: readable on every stream
    CHECK(x.wrong_bytes_on(x.s1) == 0);
  }
}

TEST_CASE("gpu scenario: a budget below the first sleep's backup refuses it with every byte in place",
          "[gpu][scenario][sleep][first_sleep][budget]") {
  PoolOptions options;
  options.release_threshold = UINT64_MAX;
  options.sleep_host_budget = std::size_t{1} << 30;
  GpuProgram x(options);
  for (std::size_t n : {768 * kMiB, 512 * kMiB + 1}) x.add(n, x.s0);
  CHECK(x.pool->sleep(SleepMode::backup, x.s0) == cudaErrorMemoryAllocation);
  CHECK_FALSE(x.pool->asleep());
  CHECK(x.pool->stats().sleep_budget_refusals == 1);
  CHECK(x.pool->stats().sleep_host_bytes <= options.sleep_host_budget);
  CHECK(x.wrong_bytes_on(x.s0) == 0);
  x.add(kMiB, x.s0);  // allocations served as before
  // Within the budget once the bigger block is gone.
  x.pool->deallocate(x.live.front().ptr, x.s0);
  x.live.erase(x.live.begin());
  REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
  CHECK(x.pool->stats().sleep_host_bytes <= options.sleep_host_budget);
  REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
  CHECK(x.wrong_bytes_on(x.s0) == 0);
}

TEST_CASE("gpu scenario: pin-ahead reaches its target with releases racing it, and the sleep after is intact",
          "[gpu][scenario][sleep][first_sleep][pin_ahead]") {
  PoolOptions options;
  options.release_threshold = UINT64_MAX;
  options.sleep_pin_ahead = true;
  GpuProgram x(options);
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};
  std::thread racer([&] {
    std::mt19937_64 rng(3);
    while (!done.load()) {
      if (x.pool->release_sleep_host_memory() != cudaSuccess) bad.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 40000));
    }
  });
  std::mt19937_64 rng(4);
  for (int i = 0; i < 12; ++i) {
    x.add(64 * kMiB + rng() % (192 * kMiB), x.s0);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30000));
  }
  done.store(true);
  racer.join();
  CHECK(bad.load() == 0);
  REQUIRE(x.pool->release_sleep_host_memory() == cudaSuccess);
  CHECK(x.pool->stats().sleep_host_bytes == 0);
  CHECK(x.pool->stats().sleep_pin_ahead_target == 0);  // holds after a release
  x.add(512 * kMiB, x.s0);  // beyond anything reserved before: pin-ahead resumes
  REQUIRE(poll(
      [&] {
        const PoolStats st = x.pool->stats();
        return st.sleep_pin_ahead_target > 0 && st.sleep_host_bytes >= st.sleep_pin_ahead_target;
      },
      60.0));
  REQUIRE(x.pool->sleep(SleepMode::backup, x.s0) == cudaSuccess);
  REQUIRE(x.pool->wake(x.s0) == cudaSuccess);
  CHECK(x.wrong_bytes_on(x.s0) == 0);
}
