// A sleep that must pin many slabs pins them on several threads and copies
// into each as it comes (sleep_slab_pinner.hpp); a failure of any one of
// them, or of any copy meanwhile, leaves the pool awake and intact, with the
// host memory it held before and nothing leaked; reserve_host_memory pins
// ahead so that the sleep pins nothing. PoolSleep over an Arena directly,
// with 2 MiB slabs, so that a backup of 24 MiB needs 12 of them.
#include "sleep/sleep_checks.hpp"

#include "arena/arena.hpp"
#include "core/pool_sleep.hpp"
#include "core/sleep_slab_pinner.hpp"

#include <cstdint>
#include <limits>
#include <memory>
#include <thread>

using namespace sova;
using namespace sova::detail;
using namespace sova::sleep_test;

namespace {

constexpr std::size_t kGranule = 2 * MiB;  // the sim's
constexpr std::size_t kSlab = 2 * MiB;
constexpr std::size_t kBacked = 24 * MiB;

SimConfig sim_config() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  return c;
}

/// An arena with 24 MiB backed, live blocks over all of it (two of them
/// coalesced across a small gap), each filled with its own pattern.
struct Backed {
  SimDriver sim{sim_config()};
  Arena arena{sim, 0, kGranule, 64 * kGranule, 0, 4 * kGranule};
  std::unique_ptr<PoolSleep> sleep;
  cudaStream_t stream = sim.create_stream();
  std::vector<PoolSleep::Range> live = {
      {0, 5 * MiB + 3}, {5 * MiB + 4096, 3 * MiB}, {9 * MiB, 7 * MiB + 1}, {16 * MiB + 2 * MiB, 6 * MiB}};
  std::vector<Filled> blocks;

  Backed() {
    REQUIRE(arena.commit(0, kBacked) == cudaSuccess);
    sleep = std::make_unique<PoolSleep>(sim, 0, arena, kSlab);
    std::uint32_t seed = 3;
    for (const PoolSleep::Range& r : live) {
      blocks.push_back(Filled{reinterpret_cast<void*>(arena.base() + r.offset), r.bytes, seed++});
      fill(blocks.back());
    }
  }
  ~Backed() {
    sleep.reset();  // its copies waited for, its host memory freed
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
  /// Awake as before the failed call: every chunk there, every byte intact.
  void check_awake_intact() {
    REQUIRE_FALSE(sleep->asleep());  // (asleep, its memory is unmapped: nothing may touch it)
    CHECK(sim.counters().physical_bytes == kBacked);
    check_intact(blocks);
  }
};

/// The slabs a sleep of Backed's blocks fills: 16 MiB + 1 (three blocks
/// coalesced across gaps under 1 MiB) and 6 MiB, in 2 MiB slabs.
constexpr std::size_t kBackupSlabs = 12;

}  // namespace

TEST_CASE("pin_slabs: every slab pinned once, each handed on on the calling thread", "[sleep][pin]") {
  SimDriver sim(sim_config());
  const std::vector<std::size_t> sizes(13, 64 * KiB);
  std::vector<PinnedSlab> pinned;
  std::vector<int> handed(sizes.size(), 0);
  bool on_caller = true;
  const std::thread::id caller = std::this_thread::get_id();
  REQUIRE(pin_slabs(sim, 0, sizes, pinned, [&](std::size_t slab) {
            on_caller = on_caller && std::this_thread::get_id() == caller;
            ++handed[slab];
            return pinned[slab].ptr != nullptr ? cudaSuccess : cudaErrorUnknown;
          }) == cudaSuccess);
  CHECK(on_caller);
  CHECK(handed == std::vector<int>(sizes.size(), 1));
  CHECK(sim.counters().pinned_host_bytes == 13 * 64 * KiB);
  for (const PinnedSlab& p : pinned) {  // distinct slabs, each registered in a mapping of its own
    CHECK(p.how == SlabPinning::registered);
    CHECK(sim.host_unregister(p.ptr) == cudaSuccess);
    CHECK(sim.host_unmap(p.ptr, p.bytes) == cudaSuccess);
  }
  CHECK(sim.counters().pinned_host_bytes == 0);
  CHECK(sim.counters().host_mapped_bytes == 0);
}

TEST_CASE("pin_slabs: an error from on_pinned stops the pinning; the slabs pinned are returned", "[sleep][pin]") {
  SimDriver sim(sim_config());
  const std::vector<std::size_t> sizes(20, 64 * KiB);
  std::vector<PinnedSlab> pinned;
  int calls = 0;
  CHECK(pin_slabs(sim, 0, sizes, pinned, [&](std::size_t) {
          return ++calls == 2 ? cudaErrorInvalidValue : cudaSuccess;
        }) == cudaErrorInvalidValue);
  CHECK(calls == 2);  // none handed on after the error
  std::size_t held = 0;
  for (const PinnedSlab& p : pinned) {
    if (p.ptr == nullptr) continue;
    held += p.bytes;
    unpin_host_slab(sim, p);
  }
  CHECK(held >= 2 * 64 * KiB);
  CHECK(sim.counters().pinned_host_bytes == 0);  // everything pinned was in `pinned`
  CHECK(sim.counters().host_mapped_bytes == 0);
}

TEST_CASE("a first sleep over many slabs backs up and restores every byte; later ones pin nothing", "[sleep][pin]") {
  Backed b;
  REQUIRE(b.sleep_backup() == cudaSuccess);
  CHECK(b.sleep->asleep());
  CHECK(b.sim.counters().physical_bytes == 0);
  CHECK(b.sleep->host_bytes() == kBackupSlabs * kSlab);
  CHECK(b.sim.counters().pinned_host_bytes == kBackupSlabs * kSlab);
  REQUIRE(b.wake() == cudaSuccess);
  check_intact(b.blocks);
  for (int cycle = 0; cycle < 3; ++cycle) {
    b.sim.fail_host_register_at(1);  // a pin would fail the sleep: there is none
    REQUIRE(b.sleep_backup() == cudaSuccess);
    b.sim.fail_host_register_at(0);
    REQUIRE(b.wake() == cudaSuccess);
    check_intact(b.blocks);
    CHECK(b.sim.counters().pinned_host_bytes == kBackupSlabs * kSlab);
  }
}

TEST_CASE("a failure of any host_alloc of a parallel pin leaves the pool awake, intact, as it held", "[sleep][pin]") {
  // Held before the sleep: none, or 3 slabs (the sleep pins the other 9).
  for (const std::size_t held : {std::size_t{0}, 3 * kSlab}) {
    const int to_pin = static_cast<int>(kBackupSlabs - held / kSlab);
    for (int n = 1; n <= to_pin; ++n) {
      DYNAMIC_SECTION("holding " << held / MiB << " MiB, host_alloc " << n << " of " << to_pin << " failing") {
        Backed b;
        REQUIRE(b.sleep->reserve_host_memory(held) == cudaSuccess);
        CHECK(b.sleep->host_bytes() == held);
        b.sim.fail_host_register_at(n);
        CHECK(b.sleep_backup() == cudaErrorMemoryAllocation);
        b.sim.fail_host_register_at(0);
        b.check_awake_intact();
        CHECK(b.sleep->host_bytes() == held);  // what this sleep pinned is freed
        CHECK(b.sim.counters().pinned_host_bytes == held);
        // And the next sleep does it all.
        REQUIRE(b.sleep_backup() == cudaSuccess);
        CHECK(b.sim.counters().physical_bytes == 0);
        REQUIRE(b.wake() == cudaSuccess);
        check_intact(b.blocks);
        CHECK(b.sim.counters().pinned_host_bytes == kBackupSlabs * kSlab);
      }
    }
  }
}

TEST_CASE("a copy failing while slabs are still being pinned leaves the pool awake, intact, nothing leaked",
          "[sleep][pin]") {
  for (int n = 1; n <= 14; ++n) {
    DYNAMIC_SECTION("copy " << n << " failing") {
      Backed b;
      b.sim.fail_memcpy_at(n);
      const cudaError_t error = b.sleep_backup();
      b.sim.fail_memcpy_at(0);
      if (error == cudaSuccess) {
        // Fewer copies than n: the sleep went through.
        CHECK(b.sim.counters().copies < static_cast<std::size_t>(n));
        REQUIRE(b.wake() == cudaSuccess);
      } else {
        b.check_awake_intact();
        CHECK(b.sleep->host_bytes() == 0);
        CHECK(b.sim.counters().pinned_host_bytes == 0);
      }
      REQUIRE(b.sleep_backup() == cudaSuccess);
      REQUIRE(b.wake() == cudaSuccess);
      check_intact(b.blocks);
    }
  }
}

TEST_CASE("reserve_host_memory pins ahead, all or nothing", "[sleep][pin]") {
  Backed b;
  REQUIRE(b.sleep->reserve_host_memory(7 * MiB) == cudaSuccess);
  CHECK(b.sleep->host_bytes() == 8 * MiB);                        // whole 2 MiB slabs
  REQUIRE(b.sleep->reserve_host_memory(5 * MiB) == cudaSuccess);  // held already: nothing
  CHECK(b.sim.counters().pinned_host_bytes == 8 * MiB);
  for (int n = 1; n <= 8; ++n) {
    b.sim.fail_host_register_at(n);
    CHECK(b.sleep->reserve_host_memory(24 * MiB) == cudaErrorMemoryAllocation);
    CHECK(b.sleep->host_bytes() == 8 * MiB);
    CHECK(b.sim.counters().pinned_host_bytes == 8 * MiB);
  }
  b.sim.fail_host_register_at(0);
  // More than any host has: refused before anything is pinned.
  CHECK(b.sleep->reserve_host_memory(std::numeric_limits<std::size_t>::max()) == cudaErrorMemoryAllocation);
  CHECK(b.sim.counters().pinned_host_bytes == 8 * MiB);
  REQUIRE(b.sleep->reserve_host_memory(kBacked) == cudaSuccess);
  CHECK(b.sleep->host_bytes() == kBacked);
  // The whole backup is held: the sleep pins nothing.
  b.sim.fail_host_register_at(1);
  REQUIRE(b.sleep_backup() == cudaSuccess);
  b.sim.fail_host_register_at(0);
  REQUIRE(b.wake() == cudaSuccess);
  check_intact(b.blocks);
  CHECK(b.sim.counters().pinned_host_bytes == kBacked);
}

TEST_CASE("Pool::reserve_sleep_backup pins ahead: the first sleep pins nothing", "[sleep][pin]") {
  SimDriver sim(sim_config());
  PoolOptions o;
  o.driver = &sim;
  Pool pool(o);
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> blocks = allocate_filled(pool, stream);
  const std::uint64_t reserved = pool.stats().reserved_current;
  REQUIRE(pool.reserve_sleep_backup(reserved) == cudaSuccess);
  CHECK(pool.stats().sleep_host_bytes >= reserved);
  sim.fail_host_register_at(1);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  sim.fail_host_register_at(0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a pool's first sleep pins a backup over 64 MiB in 64 MiB slabs; any one failing changes nothing",
          "[sleep][pin]") {
  // 150 MiB + 1000 bytes of live blocks: slabs of 64, 64 and 24 MiB (the
  // rest rounded up to 2 MiB), pinned on three threads.
  for (int n = 0; n <= 3; ++n) {
    DYNAMIC_SECTION("host_alloc " << n << " failing (0: none)") {
      SimConfig c;
      c.total_memory = std::size_t{512} << 20;
      SimDriver sim(c);
      PoolOptions o;
      o.driver = &sim;
      Pool pool(o);
      cudaStream_t stream = sim.create_stream();
      std::vector<Filled> blocks;
      for (const std::size_t size : {1000 * std::size_t{1}, 150 * MiB}) {
        blocks.push_back(Filled{pool.allocate(size, stream), size, static_cast<std::uint32_t>(size)});
        fill(blocks.back());
      }
      const std::uint64_t reserved = pool.stats().reserved_current;
      sim.fail_host_register_at(n);
      const cudaError_t error = pool.sleep(SleepMode::backup, stream);
      sim.fail_host_register_at(0);
      if (n == 0) {
        REQUIRE(error == cudaSuccess);
        CHECK(pool.stats().sleep_host_bytes == 152 * MiB);
        CHECK(sim.counters().pinned_host_bytes == 152 * MiB);
        REQUIRE(pool.wake(stream) == cudaSuccess);
        REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
      } else {
        CHECK(error == cudaErrorMemoryAllocation);
        REQUIRE_FALSE(pool.asleep());
        CHECK(pool.stats().sleep_host_bytes == 0);
        CHECK(sim.counters().pinned_host_bytes == 0);
      }
      CHECK(pool.stats().reserved_current == reserved);
      check_intact(blocks);
      free_blocks_and_stream(pool, sim, stream, blocks);
    }
  }
}
