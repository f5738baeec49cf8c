// A sleep's backup pinned in place (sleep_host_slab.hpp): each slab mapped
// (host_map), touched, registered (host_register_on); given back unregistered
// and unmapped, so that nothing stays mapped once the pool lets it go. A
// map or a register refused at any slab of a first sleep (the host out of
// memory, the locked-memory limit) leaves the pool awake, every byte intact,
// nothing of the failed sleep mapped or locked, the budget as it was. The
// pinning threads are bounded and named, and none runs once the sleep is done.
#include "sleep/filled_pool.hpp"
#include "sleep/sleep_checks.hpp"

#include "arena/arena.hpp"
#include "core/pool_sleep.hpp"
#include "core/sleep_host_slab.hpp"
#include "core/sleep_slab_pinner.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <unistd.h>

using namespace sova;
using namespace sova::detail;
using namespace sova::sleep_test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kGranule = 2 * MiB;  // the sim's
constexpr std::size_t kSlab = 2 * MiB;
constexpr std::size_t kBacked = 24 * MiB;
/// 24 MiB of live blocks in 2 MiB slabs.
constexpr int kSlabs = 12;

SimConfig sim_config() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  return c;
}

/// PoolSleep over an arena with 24 MiB backed and live, each block filled.
struct Backed {
  explicit Backed(const SimConfig& c = sim_config()) : sim(c) {
    REQUIRE(arena.commit(0, kBacked) == cudaSuccess);
    sleep = std::make_unique<PoolSleep>(sim, 0, arena, kSlab);
    std::uint32_t seed = 5;
    for (const PoolSleep::Range& r : live) {
      blocks.push_back(Filled{reinterpret_cast<void*>(arena.base() + r.offset), r.bytes, seed++});
      fill(blocks.back());
    }
  }
  ~Backed() {
    sleep.reset();
    sim.destroy_stream(stream);
  }
  cudaError_t sleep_backup() {
    return sleep->sleep(SleepMode::backup, stream, [this](std::vector<PoolSleep::Range>& out) { out = live; });
  }
  cudaError_t wake() {
    const cudaError_t e = sleep->wake(stream, [](std::size_t) { return true; });
    if (e == cudaSuccess) REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
    return e;
  }
  std::size_t calls(SimCall c) const { return sim.counters().of(c); }

  SimDriver sim;
  Arena arena{sim, 0, kGranule, 64 * kGranule, 0, 4 * kGranule};
  std::unique_ptr<PoolSleep> sleep;
  cudaStream_t stream = sim.create_stream();
  // Coalesced across the 512 KiB gap: one 24 MiB range, 12 slabs.
  std::vector<PoolSleep::Range> live = {{0, 10 * MiB}, {10 * MiB + 512 * KiB, 13 * MiB + 512 * KiB}};
  std::vector<Filled> blocks;
};

/// Threads of this process named `name` now (/proc/self/task/*/comm).
int threads_named(const std::string& name) {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ++n;
  }
  return n;
}

/// The process's resident memory now, in bytes (/proc/self/statm).
std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("a first sleep maps and registers each slab; release unregisters and unmaps every one", "[sleep][pin]") {
  Backed b;
  REQUIRE(b.sleep_backup() == cudaSuccess);
  CHECK(b.calls(SimCall::host_map) == kSlabs);
  CHECK(b.calls(SimCall::host_register_on) == kSlabs);
  CHECK(b.calls(SimCall::host_alloc_on) == 0);  // cudaHostAlloc no more
  CHECK(b.sim.counters().host_mapped_bytes == kBacked);
  CHECK(b.sim.counters().pinned_host_bytes == kBacked);
  CHECK(b.sleep->host_bytes() == kBacked);
  REQUIRE(b.wake() == cudaSuccess);
  check_intact(b.blocks);
  REQUIRE(b.sleep->release_host_memory() == cudaSuccess);
  CHECK(b.calls(SimCall::host_unregister) == kSlabs);
  CHECK(b.calls(SimCall::host_unmap) == kSlabs);
  CHECK(b.sim.counters().pinned_host_bytes == 0);
  CHECK(b.sim.counters().host_mapped_bytes == 0);
  CHECK(b.sleep->host_bytes() == 0);
}

TEST_CASE("the pool's destruction unregisters and unmaps the backup it holds", "[sleep][pin]") {
  SimDriver sim(sim_config());
  {
    FilledPool start(sim);
    auto& [pool, stream, blocks, reserved] = start;
    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    REQUIRE(pool.wake(stream) == cudaSuccess);
    check_intact_once_synchronized(sim, stream, blocks);
    CHECK(sim.counters().host_mapped_bytes == pool.stats().sleep_host_bytes);
    CHECK(sim.counters().host_mapped_bytes > 0);
    free_blocks_and_stream(pool, sim, stream, blocks);
  }
  CHECK(sim.counters().of(SimCall::host_unregister) == sim.counters().host_registers);
  check_nothing_left_with_driver(sim);
}

TEST_CASE("a map or a register refused at any slab of a first sleep leaves the pool awake, intact, nothing held",
          "[sleep][pin]") {
  struct Refusal {
    const char* what;
    std::function<void(SimDriver&, int)> arm;
    cudaError_t error;
  };
  const Refusal refusals[] = {
      {"the host refuses a mapping", [](SimDriver& s, int n) { s.fail_host_map_at(n); }, cudaErrorMemoryAllocation},
      {"the driver refuses to lock", [](SimDriver& s, int n) { s.fail_host_register_at(n); },
       cudaErrorMemoryAllocation},
      {"the driver says registration is unsupported",
       [](SimDriver& s, int n) { s.fail_host_register_at(n, cudaErrorNotSupported); }, cudaErrorNotSupported},
  };
  for (const Refusal& r : refusals) {
    // Held before the sleep: none, or 4 MiB (the sleep pins the other 10 slabs).
    for (const std::size_t held : {std::size_t{0}, 2 * kSlab}) {
      const int to_pin = kSlabs - static_cast<int>(held / kSlab);
      for (int n = 1; n <= to_pin; ++n) {
        DYNAMIC_SECTION(r.what << ", holding " << held / MiB << " MiB, at slab " << n << " of " << to_pin) {
          Backed b;
          REQUIRE(b.sleep->reserve_host_memory(held) == cudaSuccess);
          r.arm(b.sim, n);
          CHECK(b.sleep_backup() == r.error);
          r.arm(b.sim, 0);
          REQUIRE_FALSE(b.sleep->asleep());
          CHECK(b.sim.counters().physical_bytes == kBacked);
          check_intact(b.blocks);
          // What the failed sleep mapped is unmapped, what it locked unlocked.
          CHECK(b.sleep->host_bytes() == held);
          CHECK(b.sim.counters().pinned_host_bytes == held);
          CHECK(b.sim.counters().host_mapped_bytes == held);
          // The next sleep does it all.
          REQUIRE(b.sleep_backup() == cudaSuccess);
          REQUIRE(b.wake() == cudaSuccess);
          check_intact(b.blocks);
          CHECK(b.sim.counters().host_mapped_bytes == kBacked);
        }
      }
    }
  }
}

TEST_CASE("a host that locks less than the backup refuses part-way: the pool stays awake, nothing held",
          "[sleep][pin]") {
  SimConfig c = sim_config();
  c.pinned_host_memory = 15 * MiB;  // 7 slabs of the 12 fit
  Backed b(c);
  CHECK(b.sleep_backup() == cudaErrorMemoryAllocation);
  REQUIRE_FALSE(b.sleep->asleep());
  check_intact(b.blocks);
  CHECK(b.calls(SimCall::host_register_on) > 1);  // refused part-way, not at once
  CHECK(b.sleep->host_bytes() == 0);
  CHECK(b.sim.counters().pinned_host_bytes == 0);
  CHECK(b.sim.counters().host_mapped_bytes == 0);
}

TEST_CASE("the budget counts the mapped backup: a sleep beyond it maps nothing", "[sleep][pin]") {
  SimDriver sim(sim_config());
  cudaStream_t stream = sim.create_stream();
  // A 3 MiB block's backup takes 4 MiB (slabs are whole 2 MiB): a budget of
  // 2 MiB refuses it, one of 4 MiB holds it.
  PoolOptions o;
  o.driver = &sim;
  o.sleep_host_budget = 2 * MiB;
  Pool small(o);
  void* p = small.allocate(3 * MiB, stream);
  CHECK(small.sleep(SleepMode::backup, stream) == cudaErrorMemoryAllocation);
  CHECK(sim.counters().of(SimCall::host_map) == 0);
  CHECK(small.stats().sleep_budget_refusals == 1);
  o.sleep_host_budget = 4 * MiB;
  Pool fits(o);
  void* q = fits.allocate(3 * MiB, stream);
  REQUIRE(fits.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(fits.stats().sleep_host_bytes == 4 * MiB);
  CHECK(sim.counters().host_mapped_bytes == 4 * MiB);
  CHECK(sim.counters().pinned_host_bytes == 4 * MiB);
  REQUIRE(fits.wake(stream) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  fits.deallocate(q, stream);
  small.deallocate(p, stream);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  sim.destroy_stream(stream);
}

TEST_CASE("a driver without host_map pins with host_alloc_on, and frees it so", "[sleep][pin]") {
  Backed b;
  b.sim.fail_host_map_at(3, cudaErrorNotSupported);  // that slab, as a driver written before host_map answers
  REQUIRE(b.sleep_backup() == cudaSuccess);
  CHECK(b.calls(SimCall::host_alloc_on) == 1);
  CHECK(b.sim.counters().host_mapped_bytes == kBacked - kSlab);
  CHECK(b.sim.counters().pinned_host_bytes == kBacked);
  REQUIRE(b.wake() == cudaSuccess);
  check_intact(b.blocks);
  REQUIRE(b.sleep->release_host_memory() == cudaSuccess);
  CHECK(b.calls(SimCall::host_free) == 1);
  CHECK(b.calls(SimCall::host_unregister) == kSlabs - 1);
  CHECK(b.sim.counters().pinned_host_bytes == 0);
  CHECK(b.sim.counters().host_mapped_bytes == 0);
}

TEST_CASE("pin-ahead pins in place too, and the pool's destruction unmaps it", "[sleep][pin][pin_ahead]") {
  SimDriver sim(sim_config());
  const int others = threads_named("sova-pin-ahead");  // other pools' of the process, if any
  {
    PoolOptions o;
    o.driver = &sim;
    o.sleep_pin_ahead = true;
    Pool pool(o);
    cudaStream_t stream = sim.create_stream();
    std::vector<Filled> blocks = allocate_filled(pool, stream);
    REQUIRE(eventually([&] {
      const PoolStats s = pool.stats();
      return s.sleep_pin_ahead_target != 0 && s.sleep_pin_ahead_bytes >= s.sleep_pin_ahead_target;
    }));
    CHECK(sim.counters().of(SimCall::host_alloc_on) == 0);
    CHECK(sim.counters().host_registers > 0);
    CHECK(threads_named("sova-pin-ahead") == others + 1);
    CHECK(threads_named("sova-touch") == 0);  // joined by each pin
    CHECK(sim.counters().host_mapped_bytes == pool.stats().sleep_host_bytes);
    const std::size_t maps = sim.counters().of(SimCall::host_map);
    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    CHECK(sim.counters().of(SimCall::host_map) == maps);  // the first sleep pinned nothing
    REQUIRE(pool.wake(stream) == cudaSuccess);
    check_intact_once_synchronized(sim, stream, blocks);
    free_blocks_and_stream(pool, sim, stream, blocks);
  }
  CHECK(threads_named("sova-pin-ahead") == others);  // joined by the pool's destruction
  check_nothing_left_with_driver(sim);
}

TEST_CASE("a first sleep pins on at most the setting's named threads, none left once it returns", "[sleep][pin]") {
  Backed b;
  b.sim.delay_host_pins(100ms);  // long enough to see the threads, pinning
  int most = 0, most_touching = 0;
  std::atomic<bool> done{false};
  std::thread watch([&] {
    while (!done.load()) {
      const int touching = threads_named("sova-touch");
      most = std::max(most, threads_named("sova-pin") + touching);
      most_touching = std::max(most_touching, touching);
      std::this_thread::sleep_for(2ms);
    }
  });
  const cudaError_t error = b.sleep_backup();
  done.store(true);
  watch.join();
  b.sim.delay_host_pins(0ms);
  REQUIRE(error == cudaSuccess);
  // The pinning threads and the helpers touching beside them: as many as
  // the process's setting gives (by default 8 pinning, one helper each, none
  // on a host with fewer than 16 hardware threads). A helper carries its
  // pinner's name until it names itself: the two names are bounded together.
  const PinThreads setting = sleep_pin_threads();
  if (setting.pinners > 1) {
    CHECK(most > 1);
  } else {
    CHECK(most == 0);  // SOVA_SLEEP_PIN_THREADS=1: the sleeping thread alone
  }
  CHECK(most <= static_cast<int>(setting.total()));
  CHECK(most_touching <= static_cast<int>(setting.pinners * (setting.touchers_per_slab - 1)));
  CHECK(threads_named("sova-pin") == 0);
  CHECK(threads_named("sova-touch") == 0);
  REQUIRE(b.wake() == cudaSuccess);
  check_intact(b.blocks);
}

TEST_CASE("SOVA_SLEEP_PIN_THREADS: a number of threads from 1 to 64, split into pinners and touchers",
          "[sleep][pin]") {
  CHECK(parse_sleep_pin_threads("1") == 1);
  CHECK(parse_sleep_pin_threads("16") == 16);
  CHECK(parse_sleep_pin_threads("64") == kMaxSleepPinThreadsSetting);
  for (const char* bad : {"", "0", "65", "-4", "8x", " 8", "1e3", "99999999999999999999999"}) {
    INFO(bad);
    CHECK(parse_sleep_pin_threads(bad) == 0);  // refused: the default is used
  }
  CHECK(parse_sleep_pin_threads(nullptr) == 0);
  // Never more threads at once than asked for; pinners first, then touchers.
  for (std::size_t n = 1; n <= kMaxSleepPinThreadsSetting; ++n) {
    INFO(n);
    const PinThreads t = pin_threads_for(n);
    CHECK(t.pinners == std::min(n, kMaxPinThreads));
    CHECK(t.touchers_per_slab >= 1);
    CHECK(t.total() <= n);
    CHECK(t.total() > n - t.pinners);  // the rest is less than one more toucher each
  }
  CHECK(pin_threads_for(16).touchers_per_slab == 2);
  CHECK(pin_threads_for(4).pinners == 4);
  CHECK(pin_threads_for(4).touchers_per_slab == 1);
  // The default: 16 threads where the host has them, else one per pinner.
  const PinThreads d = sleep_pin_threads();
  if (std::getenv("SOVA_SLEEP_PIN_THREADS") == nullptr) {
    CHECK(d.pinners == kMaxPinThreads);
    CHECK(d.touchers_per_slab == (std::thread::hardware_concurrency() >= 16 ? 2u : 1u));
  }
}

TEST_CASE("pin_slabs runs on the threads it is given: 3 pinners of 2 touchers, or the caller alone", "[sleep][pin]") {
  SimDriver sim(sim_config());
  sim.delay_host_pins(50ms);  // long enough to see the threads, pinning
  const std::vector<std::size_t> sizes(9, 64 * KiB);
  // A helper a pinning thread starts carries its name until it names itself:
  // so the threads are counted together.
  const auto named = [] { return threads_named("sova-pin") + threads_named("sova-touch"); };
  const int before = named();
  for (const PinThreads wanted : {PinThreads{3, 2}, PinThreads{1, 1}}) {
    INFO(wanted.pinners << " pinners, " << wanted.touchers_per_slab << " touchers each");
    int most = 0;
    std::atomic<bool> done{false};
    std::thread watch([&] {
      while (!done.load()) {
        most = std::max(most, named() - before);
        std::this_thread::sleep_for(2ms);
      }
    });
    std::vector<PinnedSlab> pinned;
    int handed = 0;
    const cudaError_t error = pin_slabs(
        sim, 0, sizes, pinned, [&](std::size_t) { return ++handed, cudaSuccess; }, nullptr, wanted);
    done.store(true);
    watch.join();
    REQUIRE(error == cudaSuccess);
    CHECK(handed == static_cast<int>(sizes.size()));
    if (wanted.pinners == 1) {
      CHECK(most == 0);  // the calling thread pinned every slab itself
    } else {
      CHECK(most > 1);  // several pinning at once (the pins are slow)
      CHECK(most <= static_cast<int>(wanted.total()));
    }
    for (const PinnedSlab& p : pinned) unpin_host_slab(sim, p);
  }
  sim.delay_host_pins(0ms);
  CHECK(sim.counters().pinned_host_bytes == 0);
  CHECK(named() == before);
}

TEST_CASE("pin_host_slab touches on several threads and registers the whole slab", "[sleep][pin]") {
  SimDriver sim(sim_config());
  PinnedSlab slab;
  PinStep step = PinStep::map;
  REQUIRE(pin_host_slab(sim, 0, 6 * MiB, 3, &slab, &step) == cudaSuccess);
  CHECK(step == PinStep::none);
  CHECK(slab.how == SlabPinning::registered);
  CHECK(slab.bytes == 6 * MiB);
  CHECK(reinterpret_cast<std::uintptr_t>(slab.ptr) % (2 * MiB) == 0);  // huge-page aligned
  CHECK(sim.counters().pinned_host_bytes == 6 * MiB);
  // Touched: every page written (zeros), so the register found them faulted in.
  const auto* bytes = static_cast<const unsigned char*>(slab.ptr);
  for (std::size_t at = 0; at < slab.bytes; at += 4096) REQUIRE(bytes[at] == 0);
  unpin_host_slab(sim, slab);
  CHECK(sim.counters().pinned_host_bytes == 0);
  CHECK(sim.counters().host_mapped_bytes == 0);
  // Each refusal names its step, and nothing is held after it.
  sim.fail_host_map_at(1);
  CHECK(pin_host_slab(sim, 0, 2 * MiB, 1, &slab, &step) == cudaErrorMemoryAllocation);
  CHECK(step == PinStep::map);
  sim.fail_host_register_at(1);
  CHECK(pin_host_slab(sim, 0, 2 * MiB, 1, &slab, &step) == cudaErrorMemoryAllocation);
  CHECK(step == PinStep::register_);
  CHECK(sim.counters().host_mapped_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);
}

TEST_CASE("releasing the backup gives its pages back: the process's resident memory drops by it", "[sleep][pin]") {
  SimConfig c = sim_config();
  SimDriver sim(c);
  PoolOptions o;
  o.driver = &sim;
  Pool pool(o);
  cudaStream_t stream = sim.create_stream();
  constexpr std::size_t kBytes = 64 * MiB;
  std::vector<Filled> blocks{Filled{pool.allocate(kBytes, stream), kBytes, 9}};
  fill(blocks.back());
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  REQUIRE(pool.stats().sleep_host_bytes == kBytes);
  const std::size_t kept = resident_bytes();  // the device's memory (the sim's) and the backup's
  REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);
  const std::size_t released = resident_bytes();
  INFO("resident " << kept / MiB << " MiB with the backup, " << released / MiB << " MiB after its release");
  CHECK(kept >= released + kBytes - 4 * MiB);  // all of it but noise from other threads
  CHECK(sim.counters().host_mapped_bytes == 0);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("released at once after wake, the backup goes once the restore is done: the contents intact",
          "[sleep][pin]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  sim.delay_copies(20ms);  // the restore still runs when the release comes
  REQUIRE(pool.wake(stream) == cudaSuccess);
  REQUIRE(pool.release_sleep_host_memory() == cudaSuccess);  // waits for the restore's copies first
  sim.delay_copies(0ms);
  CHECK(sim.counters().host_mapped_bytes == 0);
  CHECK(sim.counters().pinned_host_bytes == 0);
  check_intact_once_synchronized(sim, stream, blocks);
  CHECK(sim.faults() == 0);
  free_blocks_and_stream(pool, sim, stream, blocks);
}
