// Scenario tests of the C API's growable buffers and aliases (sovaGrowable*,
// sovaMemAlias*), written from the documentation only: docs/c-api.md ("The
// rest of the VMM API", "Error messages", "Thread safety"), docs/vmm.md and
// include/sova/sova.h. They run on the C API's shared simulation
// (capi_test::sim(): two devices of 1 GiB; a device fault aborts there, so
// these tests only touch mapped memory).
//
// Random sequences are seeded: the seed is printed with every failure, and
// SOVA_SCENARIO_SEED=<n> in the environment replays one seed.
#include "support/catch.hpp"
#include "support/capi_stats.hpp"
#include "support/scenario_data.hpp"

#include "capi/capi_test_util.hpp"

#include <sova/sim.hpp>
#include <sova/sova.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace sova;
using sova::test::pattern;
using sova::test::scenario_seeds;
using sova::test::stats_of;
using namespace sova::capi_test;

namespace {

constexpr std::size_t kG = 2 * MiB;

std::size_t round_up(std::size_t v, std::size_t g) { return (v + g - 1) / g * g; }

/// Host -> device copy in stream order, waited for.
void put(cudaStream_t s, void* dev, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  REQUIRE(sim().memcpy_async(dev, host, bytes, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
}

/// Device -> host copy of [dev, dev + bytes), compared with `expected`.
bool reads(cudaStream_t s, const void* dev, const unsigned char* expected, std::size_t bytes) {
  if (bytes == 0) return true;
  std::vector<unsigned char> back(bytes, 0);
  REQUIRE(sim().memcpy_async(back.data(), dev, bytes, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  return std::memcmp(back.data(), expected, bytes) == 0;
}

bool starts_with(const char* text, const char* prefix) { return std::strncmp(text, prefix, std::strlen(prefix)) == 0; }

bool same_pool_figures(const sovaMemPoolStats& a, const sovaMemPoolStats& b) {
  return a.reservedCurrent == b.reservedCurrent && a.usedCurrent == b.usedCurrent && a.liveBlocks == b.liveBlocks &&
         a.allocations == b.allocations && a.deallocations == b.deallocations;
}

std::size_t physical_of(sovaGrowable_t g) {
  std::size_t physical = 0;
  REQUIRE(sovaGrowableGetInfo(g, nullptr, &physical) == cudaSuccess);
  return physical;
}
std::size_t size_of(sovaGrowable_t g) {
  std::size_t size = 0;
  REQUIRE(sovaGrowableGetInfo(g, &size, nullptr) == cudaSuccess);
  return size;
}

}  // namespace

// ---------------------------------------------------------------------------
// Growable buffers
// ---------------------------------------------------------------------------

TEST_CASE("scenario C API growable: bad arguments get the documented codes and create nothing",
          "[vmm][growable][capi][scenario]") {
  sim();
  const std::size_t reservations = sim().counters().reservations;
  sovaGrowable_t g = nullptr;
  void* p = nullptr;
  // sova.h: "NULL arguments or maxSize 0: cudaErrorInvalidValue; a bad device: cudaErrorInvalidDevice".
  CHECK(sovaGrowableCreate(nullptr, &p, MiB, 0) == cudaErrorInvalidValue);
  CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableCreate"));
  CHECK(sovaGrowableCreate(&g, nullptr, MiB, 0) == cudaErrorInvalidValue);
  CHECK(sovaGrowableCreate(nullptr, nullptr, MiB, 0) == cudaErrorInvalidValue);
  CHECK(sovaGrowableCreate(&g, &p, 0, 0) == cudaErrorInvalidValue);
  for (int device : {-1, 2, 64, 1 << 20, std::numeric_limits<int>::min()}) {
    INFO("device " << device);
    CHECK(sovaGrowableCreate(&g, &p, MiB, device) == cudaErrorInvalidDevice);
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableCreate"));
  }
  // VA no process has: growable.hpp's "cudaErrorMemoryAllocation when the VA cannot be had".
  CHECK(sovaGrowableCreate(&g, &p, std::size_t{1} << 62, 0) == cudaErrorMemoryAllocation);
  CHECK(sim().counters().reservations == reservations);  // nothing reserved by any of them
}

TEST_CASE("scenario C API growable: invalid, destroyed and foreign handles are refused; a failure changes nothing",
          "[vmm][growable][capi][scenario]") {
  ScopedStream s;
  ScopedPool pool(0);
  sovaGrowable_t g = nullptr;
  void* p = nullptr;
  const std::size_t max = 3 * MiB + 5;  // not a granule multiple
  REQUIRE(sovaGrowableCreate(&g, &p, max, 0) == cudaSuccess);
  REQUIRE(g != nullptr);
  REQUIRE(p != nullptr);
  std::size_t size = 1, physical = 1;
  REQUIRE(sovaGrowableGetInfo(g, &size, &physical) == cudaSuccess);
  CHECK(size == 0);  // "no memory yet"
  CHECK(physical == 0);
  CHECK(sovaGrowableGetInfo(g, nullptr, nullptr) == cudaSuccess);  // "either pointer may be NULL"

  REQUIRE(sovaGrowableResize(g, 2 * MiB + 1, s) == cudaSuccess);
  const auto ref = pattern(max, 31);
  put(s, p, ref.data(), 2 * MiB + 1);

  int on_stack = 0;
  void* block = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&block, MiB, pool, s) == cudaSuccess);
  const sovaGrowable_t garbage[] = {
      nullptr,
      reinterpret_cast<sovaGrowable_t>(&on_stack),   // host memory
      reinterpret_cast<sovaGrowable_t>(p),           // the buffer's address, not its handle
      reinterpret_cast<sovaGrowable_t>(pool.get()),  // a pool handle
      reinterpret_cast<sovaGrowable_t>(block),       // a block
      reinterpret_cast<sovaGrowable_t>(reinterpret_cast<std::uintptr_t>(g) + 8),  // near the handle
      reinterpret_cast<sovaGrowable_t>(~std::uintptr_t{0}),                       // all ones
  };
  for (sovaGrowable_t bad : garbage) {
    INFO("handle " << static_cast<void*>(bad));
    // c-api.md: "invalid buffer: cudaErrorInvalidValue (handles are checked against the live set,
    // never dereferenced)".
    CHECK(sovaGrowableResize(bad, MiB, s) == cudaErrorInvalidValue);
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableResize"));
    CHECK(sovaGrowableGetInfo(bad, &size, &physical) == cudaErrorInvalidValue);
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableGetInfo"));
    CHECK(sovaGrowableDestroy(bad) == cudaErrorInvalidValue);
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableDestroy"));
  }
  // Beyond the maximum asked for, even inside the rounded reservation: "size > maxSize".
  for (std::size_t beyond : {max + 1, round_up(max, kG), round_up(max, kG) + 1, std::size_t{1} << 40,
                             std::numeric_limits<std::size_t>::max()}) {
    INFO("resize to " << beyond << " of maxSize " << max);
    CHECK(sovaGrowableResize(g, beyond, s) == cudaErrorInvalidValue);
    CHECK(size_of(g) == 2 * MiB + 1);  // "Any failure changes nothing"
    CHECK(physical_of(g) == 4 * MiB);
  }
  CHECK(reads(s, p, ref.data(), 2 * MiB + 1));
  // The buffer's memory is no pool's: sovaFreeAsync refuses it ("a pointer that lies in no sova
  // pool ... cudaErrorInvalidValue"), and sovaMemGetAllocationProperties too ("ptr not the
  // start of a live block of a sova pool"); neither changes the buffer.
  const sovaMemPoolStats pool_before = stats_of(pool);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  sovaAllocationProperties props;
  CHECK(sovaMemGetAllocationProperties(&props, p) == cudaErrorInvalidValue);
  CHECK(same_pool_figures(stats_of(pool), pool_before));
  CHECK(size_of(g) == 2 * MiB + 1);
  CHECK(physical_of(g) == 4 * MiB);
  CHECK(reads(s, p, ref.data(), 2 * MiB + 1));
  // Exactly the maximum works.
  REQUIRE(sovaGrowableResize(g, max, s) == cudaSuccess);
  CHECK(size_of(g) == max);
  CHECK(physical_of(g) == round_up(max, kG));
  CHECK(reads(s, p, ref.data(), 2 * MiB + 1));
  put(s, p, ref.data(), max);
  CHECK(reads(s, p, ref.data(), max));

  // Use after destroy, double destroy.
  REQUIRE(sovaGrowableDestroy(g) == cudaSuccess);
  CHECK(sovaGrowableDestroy(g) == cudaErrorInvalidValue);
  CHECK(sovaGrowableResize(g, MiB, s) == cudaErrorInvalidValue);
  CHECK(sovaGrowableGetInfo(g, &size, &physical) == cudaErrorInvalidValue);
  // The pool and its block never noticed.
  CHECK(sovaFreeAsync(block, s) == cudaSuccess);
}

TEST_CASE("scenario C API growable: out of device memory changes nothing, on either device",
          "[vmm][growable][capi][scenario]") {
  ScopedStream s;
  for (int device : {0, 1}) {
    INFO("device " << device);
    sovaGrowable_t g = nullptr;
    void* p = nullptr;
    REQUIRE(sovaGrowableCreate(&g, &p, std::size_t{4} << 30, device) == cudaSuccess);  // 4x the device
    REQUIRE(sovaGrowableResize(g, 5 * MiB, s) == cudaSuccess);
    const auto ref = pattern(5 * MiB, 7 + device);
    put(s, p, ref.data(), ref.size());
    CHECK(sovaGrowableResize(g, std::size_t{2} << 30, s) == cudaErrorMemoryAllocation);  // "out of memory"
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaGrowableResize"));
    CHECK(size_of(g) == 5 * MiB);
    CHECK(physical_of(g) == 6 * MiB);
    CHECK(reads(s, p, ref.data(), ref.size()));
    REQUIRE(sovaGrowableResize(g, 64 * MiB, s) == cudaSuccess);  // still grows
    CHECK(reads(s, p, ref.data(), ref.size()));
    REQUIRE(sovaGrowableDestroy(g) == cudaSuccess);
  }
}

TEST_CASE("scenario C API growable: a destroyed buffer's handle stays invalid while new buffers are made",
          "[vmm][growable][capi][scenario]") {
  // c-api.md: "sovaGrowableGetInfo / sovaGrowableDestroy: invalid buffer: cudaErrorInvalidValue
  // (a handle is never reused: a destroyed buffer's stays invalid)"; sova.h: "size > maxSize,
  // NULL or invalid buffer: cudaErrorInvalidValue". Address handles once came back valid for
  // the next buffer made at the same address, and a call through the stale one acted on it.
  ScopedStream s;
  sovaGrowable_t first = nullptr;
  void* p = nullptr;
  REQUIRE(sovaGrowableCreate(&first, &p, 8 * MiB, 0) == cudaSuccess);
  REQUIRE(sovaGrowableDestroy(first) == cudaSuccess);
  CHECK(sovaGrowableGetInfo(first, nullptr, nullptr) == cudaErrorInvalidValue);
  std::vector<sovaGrowable_t> later;
  for (int i = 0; i < 64; ++i) {  // new buffers until one gets the old handle's value, if any does
    sovaGrowable_t g = nullptr;
    void* q = nullptr;
    REQUIRE(sovaGrowableCreate(&g, &q, 8 * MiB, 0) == cudaSuccess);
    later.push_back(g);
    if (g == first) break;
  }
  INFO(later.size() << " buffers made since; the destroyed handle " << static_cast<void*>(first)
                    << (later.back() == first ? " is the last one's handle" : " came back for none"));
  CHECK(sovaGrowableResize(first, MiB, s) == cudaErrorInvalidValue);
  CHECK(sovaGrowableGetInfo(first, nullptr, nullptr) == cudaErrorInvalidValue);
  for (sovaGrowable_t g : later) {
    // The buffer that got the stale handle's value was resized through it above.
    INFO("buffer " << static_cast<void*>(g) << (g == first ? " (the stale handle's value)" : ""));
    CHECK(size_of(g) == 0);
    CHECK(sovaGrowableDestroy(g) == cudaSuccess);
  }
}

TEST_CASE("scenario C API growable: random resize sequences on both devices", "[vmm][growable][capi][scenario]") {
  for (std::uint64_t seed : scenario_seeds({41, 42, 43, 44})) {
    INFO("seed " << seed << " (replay: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {
      return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    ScopedStream s;
    struct Buf {
      sovaGrowable_t g = nullptr;
      void* p = nullptr;
      std::size_t max = 0, valid = 0;
      std::vector<unsigned char> ref;
    };
    std::vector<Buf> bufs(pick(1, 4));
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      Buf& b = bufs[i];
      b.max = pick(0, 1) == 0 ? pick(1, 5 * kG) : pick(1, 48 * MiB);
      REQUIRE(sovaGrowableCreate(&b.g, &b.p, b.max, static_cast<int>(pick(0, 1))) == cudaSuccess);
      b.ref = pattern(b.max, seed * 10 + i);
    }
    for (int step = 0; step < 50; ++step) {
      Buf& b = bufs[pick(0, bufs.size() - 1)];
      const std::size_t old_size = size_of(b.g), old_phys = physical_of(b.g);
      std::size_t target = 0;
      switch (pick(0, 5)) {
        case 0: target = b.max; break;
        case 1: target = b.max + pick(1, kG); break;
        case 2: target = 0; break;
        default: target = pick(0, b.max); break;
      }
      INFO("step " << step << ": resize " << old_size << " -> " << target << " of maxSize " << b.max);
      const cudaError_t e = sovaGrowableResize(b.g, target, s);
      if (target > b.max) {
        CHECK(e == cudaErrorInvalidValue);
        CHECK(size_of(b.g) == old_size);
        CHECK(physical_of(b.g) == old_phys);
        continue;
      }
      REQUIRE(e == cudaSuccess);  // 4 x 48 MiB at most: always fits the 1 GiB devices
      CHECK(size_of(b.g) == target);
      const std::size_t phys = physical_of(b.g);
      if (target > old_phys) {
        CHECK(phys == round_up(target, kG));
      } else {
        CHECK(phys >= round_up(target, kG));
        CHECK(phys <= old_phys);
      }
      b.valid = std::min(b.valid, target);
      CHECK(reads(s, b.p, b.ref.data(), b.valid));
      put(s, static_cast<char*>(b.p) + b.valid, b.ref.data() + b.valid, target - b.valid);
      b.valid = target;
    }
    for (Buf& b : bufs) {
      CHECK(reads(s, b.p, b.ref.data(), b.valid));
      CHECK(sovaGrowableDestroy(b.g) == cudaSuccess);
    }
  }
}

// ---------------------------------------------------------------------------
// Aliases
// ---------------------------------------------------------------------------

TEST_CASE("scenario C API alias: bad arguments are cudaErrorInvalidValue and change nothing",
          "[vmm][alias][capi][scenario]") {
  ScopedStream s;
  ScopedPool pool(0);
  void* p = nullptr;
  void* freed = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 5 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&freed, MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(freed, s) == cudaSuccess);
  sovaGrowable_t g = nullptr;
  void* gp = nullptr;
  REQUIRE(sovaGrowableCreate(&g, &gp, 8 * MiB, 0) == cudaSuccess);
  REQUIRE(sovaGrowableResize(g, 4 * MiB, s) == cudaSuccess);
  void* good = nullptr;
  REQUIRE(sovaMemAliasCreate(&good, p, cudaMemAccessFlagsProtReadWrite) == cudaSuccess);
  REQUIRE(good != nullptr);
  CHECK(good != p);
  int on_stack = 0;

  const sovaMemPoolStats st = stats_of(pool);
  const SimCounters before = sim().counters();
  const auto rw = cudaMemAccessFlagsProtReadWrite;
  void* a = nullptr;
  // sova.h: "Anything but a live block's start, or other flags: cudaErrorInvalidValue".
  CHECK(sovaMemAliasCreate(nullptr, p, rw) == cudaErrorInvalidValue);
  CHECK(starts_with(sovaGetLastErrorMessage(), "sovaMemAliasCreate"));
  CHECK(sovaMemAliasCreate(&a, nullptr, rw) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasCreate(&a, static_cast<char*>(p) + 512, rw) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasCreate(&a, static_cast<char*>(p) + 5 * MiB, rw) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasCreate(&a, freed, rw) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasCreate(&a, &on_stack, rw) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasCreate(&a, gp, rw) == cudaErrorInvalidValue);    // a growable buffer is no block
  CHECK(sovaMemAliasCreate(&a, good, rw) == cudaErrorInvalidValue);  // nor is an alias
  for (int flags : {0, 2, 4, 7, -1, 0x100}) {
    INFO("flags " << flags);
    CHECK(sovaMemAliasCreate(&a, p, static_cast<cudaMemAccessFlags>(flags)) == cudaErrorInvalidValue);
    CHECK(starts_with(sovaGetLastErrorMessage(), "sovaMemAliasCreate"));
  }
  // Destroying what is no live alias: "An address that is no live alias: cudaErrorInvalidValue".
  CHECK(sovaMemAliasDestroy(nullptr) == cudaErrorInvalidValue);
  CHECK(starts_with(sovaGetLastErrorMessage(), "sovaMemAliasDestroy"));
  CHECK(sovaMemAliasDestroy(p) == cudaErrorInvalidValue);  // the block itself
  CHECK(sovaMemAliasDestroy(static_cast<char*>(good) + 512) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasDestroy(&on_stack) == cudaErrorInvalidValue);
  CHECK(sovaMemAliasDestroy(gp) == cudaErrorInvalidValue);
  // An alias is no pool memory: freeing it is "a pointer that lies in no sova pool".
  CHECK(sovaFreeAsync(good, s) == cudaErrorInvalidValue);
  sovaAllocationProperties props;
  CHECK(sovaMemGetAllocationProperties(&props, good) == cudaErrorInvalidValue);
  const SimCounters after = sim().counters();
  CHECK(after.mappings == before.mappings);
  CHECK(after.reservations == before.reservations);
  CHECK(same_pool_figures(stats_of(pool), st));

  // The alias and its block still work.
  const auto ref = pattern(5 * MiB, 55);
  put(s, good, ref.data(), ref.size());
  CHECK(reads(s, p, ref.data(), ref.size()));
  REQUIRE(sovaMemAliasDestroy(good) == cudaSuccess);
  CHECK(sovaMemAliasDestroy(good) == cudaErrorInvalidValue);  // double destroy
  CHECK(sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtRead) == cudaSuccess);
  CHECK(reads(s, a, ref.data(), ref.size()));
  CHECK(sovaMemAliasDestroy(a) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaGrowableDestroy(g) == cudaSuccess);
}

TEST_CASE("scenario C API alias: several aliases of several blocks, destroyed in odd orders",
          "[vmm][alias][capi][scenario]") {
  for (std::uint64_t seed : scenario_seeds({61, 62, 63})) {
    INFO("seed " << seed << " (replay: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {
      return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    ScopedStream s;
    ScopedPool pool(static_cast<int>(pick(0, 1)));
    struct Block {
      void* p;
      std::size_t n;
      std::vector<unsigned char> data;
      std::vector<void*> aliases;
    };
    std::vector<Block> blocks;
    const std::size_t mappings0 = sim().counters().mappings;
    for (int i = 0; i < 8; ++i) {
      const std::size_t n = pick(0, 2) == 0 ? pick(33 * MiB, 50 * MiB) : pick(1, 3 * MiB);
      void* p = nullptr;
      REQUIRE(sovaMallocFromPoolAsync(&p, n, pool, s) == cudaSuccess);
      blocks.push_back({p, n, pattern(n, seed + i), {}});
      put(s, p, blocks.back().data.data(), n);
    }
    const std::size_t mappings1 = sim().counters().mappings;
    for (int i = 0; i < 20; ++i) {
      Block& b = blocks[pick(0, blocks.size() - 1)];
      void* a = nullptr;
      const bool writable = pick(0, 1) == 0;
      REQUIRE(sovaMemAliasCreate(&a, b.p, writable ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtRead) ==
              cudaSuccess);
      CHECK(a != b.p);
      CHECK(reads(s, a, b.data.data(), b.n));
      if (writable) {
        b.data = pattern(b.n, rng());
        put(s, a, b.data.data(), b.n);
      }
      b.aliases.push_back(a);
    }
    // Every alias of every block reads the block's last contents, whichever view wrote them.
    std::set<void*> seen;
    for (Block& b : blocks)
      for (void* a : b.aliases) {
        CHECK(seen.insert(a).second);  // a VA range of its own
        CHECK(reads(s, a, b.data.data(), b.n));
      }
    // Destroy in a shuffled order over all blocks; free each block once its aliases are gone.
    std::vector<std::pair<std::size_t, void*>> all;
    for (std::size_t i = 0; i < blocks.size(); ++i)
      for (void* a : blocks[i].aliases) all.emplace_back(i, a);
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<std::size_t> left(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) left[i] = blocks[i].aliases.size();
    for (auto& [i, a] : all) {
      REQUIRE(sovaMemAliasDestroy(a) == cudaSuccess);
      CHECK(sovaMemAliasDestroy(a) == cudaErrorInvalidValue);
      if (--left[i] == 0) {
        CHECK(reads(s, blocks[i].p, blocks[i].data.data(), blocks[i].n));
        REQUIRE(sovaFreeAsync(blocks[i].p, s) == cudaSuccess);
        blocks[i].p = nullptr;
      }
    }
    CHECK(sim().counters().mappings <= mappings1);
    for (Block& b : blocks)
      if (b.p != nullptr) REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
    s.synchronize();
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    CHECK(sim().counters().mappings <= mappings0);
  }
}

TEST_CASE("scenario C API alias: an alias keeps working on a destroyed pool's live block",
          "[vmm][alias][capi][scenario]") {
  // c-api.md, sovaMemPoolDestroy: "Blocks still live stay valid (their contents intact): the
  // pool's memory is released when the last of them is freed". An alias of such a block is
  // still an alias of a live block.
  ScopedStream s;
  ScopedPool scoped(0);
  sovaMemPool_t pool = scoped.release();
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 40 * MiB, pool, s) == cudaSuccess);
  void* a = nullptr;
  REQUIRE(sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtReadWrite) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  const auto ref = pattern(40 * MiB, 71);
  put(s, a, ref.data(), ref.size());
  CHECK(reads(s, p, ref.data(), ref.size()));
  // A second alias, made after the destroy, of the block that is still live.
  void* b = nullptr;
  CHECK(sovaMemAliasCreate(&b, p, cudaMemAccessFlagsProtRead) == cudaSuccess);
  if (b != nullptr) {
    CHECK(reads(s, b, ref.data(), ref.size()));
    CHECK(sovaMemAliasDestroy(b) == cudaSuccess);
  }
  REQUIRE(sovaMemAliasDestroy(a) == cudaSuccess);
  const std::size_t reservations = sim().counters().reservations;
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);  // the last block: the pool is released
  s.synchronize();
  CHECK(sim().counters().reservations == reservations - 1);
}

TEST_CASE("scenario C API alias: destroying an alias after its block was freed", "[vmm][alias][capi][scenario]") {
  // vmm.md: "An alias lives no longer than its block. Destroy it before freeing the block."
  // A program that frees first has an alias that must not be used; destroying it is still the
  // way to give its VA back, and sova.h refuses only "an address that is no live alias"
  // (ambiguous: is an alias of a freed block still "live"? This test reads it as yes).
  ScopedStream s;
  ScopedPool pool(0);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, s) == cudaSuccess);
  const std::size_t mappings = sim().counters().mappings;
  const std::size_t reservations = sim().counters().reservations;
  void* a = nullptr;
  REQUIRE(sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtReadWrite) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  s.synchronize();
  CHECK(sovaMemAliasDestroy(a) == cudaSuccess);
  CHECK(sovaMemAliasDestroy(a) == cudaErrorInvalidValue);
  CHECK(sim().counters().reservations == reservations);  // the alias's VA is back
  CHECK(sim().counters().mappings <= mappings);
}

// ---------------------------------------------------------------------------
// Threads: "Every function may be called from any thread at once."
// ---------------------------------------------------------------------------

TEST_CASE("scenario C API threads: growables and aliases made, used and destroyed on several threads at once",
          "[vmm][growable][alias][capi][scenario][threads]") {
  const std::uint64_t base = scenario_seeds({81}).front();
  INFO("seed " << base << " (replay: SOVA_SCENARIO_SEED=" << base << ")");
  ScopedPool pool(0);
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::string> first_failure(kThreads);
  auto fail = [&](int t, const std::string& what) {
    if (first_failure[t].empty()) first_failure[t] = what;
    failures++;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(base * 100 + t);
      auto pick = [&rng](std::size_t lo, std::size_t hi) {
        return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
      };
      cudaStream_t s = sim().create_stream();
      sovaGrowable_t g = nullptr;
      void* gp = nullptr;
      const std::size_t gmax = 16 * MiB;
      if (sovaGrowableCreate(&g, &gp, gmax, t % 2) != cudaSuccess) {
        fail(t, "sovaGrowableCreate");
        return;
      }
      const auto gref = pattern(gmax, base + t);
      std::size_t valid = 0;
      std::vector<unsigned char> back;
      for (int i = 0; i < 40; ++i) {
        // A block, an alias of it, a write through the alias, a read through the block.
        const std::size_t n = pick(1, 6 * MiB);
        void* p = nullptr;
        if (sovaMallocFromPoolAsync(&p, n, pool, s) != cudaSuccess) {
          fail(t, "sovaMallocFromPoolAsync");
          break;
        }
        void* a = nullptr;
        if (sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtReadWrite) != cudaSuccess) {
          fail(t, std::string("sovaMemAliasCreate: ") + sovaGetLastErrorMessage());
          break;
        }
        const auto data = pattern(n, base * 1000 + t * 100 + i);
        back.assign(n, 0);
        sim().memcpy_async(a, data.data(), n, s);
        sim().memcpy_async(back.data(), p, n, s);
        sim().stream_synchronize(s);
        if (back != data) fail(t, "block does not read what its alias wrote");
        if (sovaMemAliasDestroy(a) != cudaSuccess) fail(t, "sovaMemAliasDestroy");
        if (sovaFreeAsync(p, s) != cudaSuccess) fail(t, "sovaFreeAsync");
        // The thread's growable buffer, resized and checked.
        const std::size_t target = pick(0, gmax);
        if (sovaGrowableResize(g, target, s) != cudaSuccess) {
          fail(t, "sovaGrowableResize");
          break;
        }
        valid = std::min(valid, target);
        back.assign(valid, 0);
        if (valid > 0) sim().memcpy_async(back.data(), gp, valid, s);
        sim().stream_synchronize(s);
        if (valid > 0 && std::memcmp(back.data(), gref.data(), valid) != 0) fail(t, "growable lost its bytes");
        if (target > valid) sim().memcpy_async(static_cast<char*>(gp) + valid, gref.data() + valid, target - valid, s);
        sim().stream_synchronize(s);
        valid = target;
      }
      if (sovaGrowableDestroy(g) != cudaSuccess) fail(t, "sovaGrowableDestroy");
      sim().stream_synchronize(s);
      sim().destroy_stream(s);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t << ": " << first_failure[t]);
    CHECK(first_failure[t].empty());
  }
  CHECK(failures.load() == 0);
}

TEST_CASE("scenario C API threads: many aliases of one block made and destroyed on several threads at once",
          "[vmm][alias][capi][scenario][threads]") {
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 36 * MiB, s) == cudaSuccess);  // the default pool's block, over chunks
  const auto ref = pattern(36 * MiB, 101);
  put(s, p, ref.data(), ref.size());
  constexpr int kThreads = 4;
  std::vector<std::string> failure(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t ts = sim().create_stream();
      std::vector<unsigned char> back(36 * MiB);
      for (int i = 0; i < 12 && failure[t].empty(); ++i) {
        void* a = nullptr;
        if (sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtRead) != cudaSuccess) {
          failure[t] = std::string("create: ") + sovaGetLastErrorMessage();
          break;
        }
        sim().memcpy_async(back.data(), a, back.size(), ts);
        sim().stream_synchronize(ts);
        if (std::memcmp(back.data(), ref.data(), ref.size()) != 0) failure[t] = "an alias read other bytes";
        if (sovaMemAliasDestroy(a) != cudaSuccess) failure[t] = std::string("destroy: ") + sovaGetLastErrorMessage();
      }
      sim().destroy_stream(ts);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t << ": " << failure[t]);
    CHECK(failure[t].empty());
  }
  CHECK(reads(s, p, ref.data(), ref.size()));
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("scenario C API threads: two threads destroying one growable or one alias: exactly one succeeds",
          "[vmm][growable][alias][capi][scenario][threads]") {
  ScopedStream s;
  ScopedPool pool(0);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4 * MiB, pool, s) == cudaSuccess);
  for (int round = 0; round < 40; ++round) {
    INFO("round " << round);
    const bool alias = round % 2 == 1;
    sovaGrowable_t g = nullptr;
    void* gp = nullptr;
    void* a = nullptr;
    if (alias) {
      REQUIRE(sovaMemAliasCreate(&a, p, cudaMemAccessFlagsProtRead) == cudaSuccess);
    } else {
      REQUIRE(sovaGrowableCreate(&g, &gp, 8 * MiB, 0) == cudaSuccess);
      REQUIRE(sovaGrowableResize(g, 4 * MiB, s) == cudaSuccess);
    }
    std::atomic<int> ready{0};
    cudaError_t codes[2] = {cudaErrorUnknown, cudaErrorUnknown};
    auto destroy = [&](int i) {
      ready++;
      while (ready.load() < 2) {
      }
      codes[i] = alias ? sovaMemAliasDestroy(a) : sovaGrowableDestroy(g);
    };
    std::thread t0(destroy, 0), t1(destroy, 1);
    t0.join();
    t1.join();
    const int successes = (codes[0] == cudaSuccess) + (codes[1] == cudaSuccess);
    const int refusals = (codes[0] == cudaErrorInvalidValue) + (codes[1] == cudaErrorInvalidValue);
    INFO((alias ? "alias" : "growable") << ": codes " << codes[0] << ", " << codes[1]);
    CHECK(successes == 1);
    CHECK(refusals == 1);
  }
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
}
