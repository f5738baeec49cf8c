// Scenario tests of the C API's pools and their statistics, written from the
// documentation only (docs/c-api.md "Allocation", "Pools", "Error messages",
// "Devices"; docs/runtime-errors.md; README.md; include/sova/sova.h), as a user
// switching from cudaMallocAsync would use them:
//
//  * random seeded sequences (the seed is printed on failure) of allocations
//    and frees on several streams, frees on other streams, synchronizes,
//    trims to random sizes, attribute changes and high-water resets, with the
//    documented invariants checked after every step;
//  * the release threshold after a synchronize, and trim bounds;
//  * the default pool per device against created pools, the current pool,
//    destroy with live blocks and use after destroy;
//  * bad input, row by row of docs/runtime-errors.md: the code, the
//    sovaGetLastErrorMessage words and statistics unchanged by each refusal;
//  * threads on their own streams sharing a pool, freeing each other's blocks.
//
// Tags: [capi][scenario][pool_stats]. Run:
//   build/test/sova_tests "[pool_stats]"
// A random case takes its seeds from a fixed list plus SOVA_SCENARIO_SEED
// when the environment has it. A case tagged [!shouldfail] is a known defect
// against the documentation (the comment above it quotes it).
#include "capi_test_util.hpp"
#include "support/capi_stats.hpp"
#include "support/scoped_current_device.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::capi_test;
using sova::test::stats_of;

namespace {

constexpr std::uint64_t kNoRelease = UINT64_MAX;

std::string last() { return sovaGetLastErrorMessage(); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

void set_u64(sovaMemPool_t pool, cudaMemPoolAttr a, std::uint64_t v) {
  REQUIRE(sovaMemPoolSetAttribute(pool, a, &v) == cudaSuccess);
}
void set_int(sovaMemPool_t pool, cudaMemPoolAttr a, int v) {
  REQUIRE(sovaMemPoolSetAttribute(pool, a, &v) == cudaSuccess);
}
int get_int(sovaMemPool_t pool, cudaMemPoolAttr a) {
  int v = -1;
  REQUIRE(sovaMemPoolGetAttribute(pool, a, &v) == cudaSuccess);
  return v;
}

// The figures a refused call must leave as they were (docs/c-api.md: "nothing
// changes", "the pool unchanged", "the pool's statistics as they were").
struct Core {
  std::uint64_t reservedCurrent, reservedHigh, usedCurrent, usedHigh, liveBlocks, allocations, deallocations,
      failedAllocations;
  bool operator==(const Core& o) const {
    return reservedCurrent == o.reservedCurrent && reservedHigh == o.reservedHigh && usedCurrent == o.usedCurrent &&
           usedHigh == o.usedHigh && liveBlocks == o.liveBlocks && allocations == o.allocations &&
           deallocations == o.deallocations && failedAllocations == o.failedAllocations;
  }
};
std::ostream& operator<<(std::ostream& os, const Core& c) {
  return os << "{reserved " << c.reservedCurrent << " (high " << c.reservedHigh << "), used " << c.usedCurrent
            << " (high " << c.usedHigh << "), live " << c.liveBlocks << ", allocs " << c.allocations << ", frees "
            << c.deallocations << ", failed " << c.failedAllocations << "}";
}
Core core(sovaMemPool_t pool) {
  const sovaMemPoolStats s = stats_of(pool);
  return {s.reservedCurrent, s.reservedHigh, s.usedCurrent,   s.usedHigh,
          s.liveBlocks,      s.allocations,  s.deallocations, s.failedAllocations};
}

// A stream held busy until open() (or 20 s, so that a defect never hangs the
// suite): proves "before the stream reaches it" without timing.
class Gate {
 public:
  explicit Gate(cudaStream_t s) : future_(promise_.get_future().share()) {
    auto f = future_;
    sim().launch(s, [f] { f.wait_for(std::chrono::seconds(20)); });
  }
  ~Gate() { open(); }
  void open() {
    if (!opened_) promise_.set_value();
    opened_ = true;
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_;
  bool opened_ = false;
};

// Waits up to `limit` for `pred` (never a timing assertion: the test asserts
// the end state, given plenty of time to reach it).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

std::vector<std::uint64_t> seeds() {
  std::vector<std::uint64_t> out = {1, 2, 3, 20240601, 0xC0FFEE};
  if (const char* env = std::getenv("SOVA_SCENARIO_SEED")) out.push_back(std::strtoull(env, nullptr, 0));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// Random sequences
// ---------------------------------------------------------------------------

TEST_CASE("scenario: random malloc/free/sync/trim/attribute sequences keep the documented invariants",
          "[capi][scenario][pool_stats]") {
  for (const std::uint64_t seed : seeds()) {
    INFO("seed " << seed << " (rerun one seed: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
      return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
    };
    sovaMemPoolProps props = props_on(0);
    props.policy = static_cast<sovaPolicy>(pick(0, 3));
    ScopedPool pool(props);
    ScopedStream s1, s2, s3;
    const cudaStream_t streams[] = {s1, s2, s3, nullptr /* legacy stream of device 0 */};
    auto any_stream = [&] { return streams[pick(0, 3)]; };

    struct Block {
      std::size_t size;
      cudaStream_t stream;
      unsigned char tag;
    };
    std::map<char*, Block> live;
    std::uint64_t live_bytes = 0, used_high = 0, allocs = 0, frees = 0;
    std::uint64_t last_reserved_high = 0;
    unsigned char next_tag = 1;
    int step = 0;
    std::string op;

    auto check = [&] {
      INFO("step " << step << " after " << op);
      const sovaMemPoolStats s = stats_of(pool);
      // Requested bytes, exactly (docs/c-api.md: "UsedMemCurrent counts the
      // requested bytes ... and drops at the free").
      CHECK(s.usedCurrent == live_bytes);
      CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == live_bytes);
      CHECK(s.liveBlocks == live.size());
      CHECK(s.allocations == allocs);
      CHECK(s.deallocations == frees);
      CHECK(s.failedAllocations == 0);
      CHECK(s.usedCurrent <= s.reservedCurrent);
      CHECK(s.usedHigh >= s.usedCurrent);
      CHECK(s.reservedHigh >= s.reservedCurrent);
      // The used high-water mark since the last reset: the highest used this
      // single-threaded test saw (it reads the statistics after every step).
      used_high = std::max(used_high, live_bytes);
      CHECK(s.usedHigh == used_high);
      // Monotone until reset.
      CHECK(s.reservedHigh >= last_reserved_high);
      last_reserved_high = s.reservedHigh;
    };

    for (step = 0; step < 400; ++step) {
      const std::uint64_t dice = pick(0, 99);
      if (dice < 40 && live_bytes < 256 * MiB) {
        std::size_t size = 0;
        switch (pick(0, 2)) {
          case 0: size = pick(1, 4096); break;
          case 1: size = pick(4097, MiB); break;
          default: size = pick(MiB + 1, 24 * MiB); break;
        }
        const cudaStream_t s = any_stream();
        op = "malloc " + std::to_string(size);
        void* p = reinterpret_cast<void*>(0x1);
        REQUIRE(sovaMallocFromPoolAsync(&p, size, pool, s) == cudaSuccess);
        REQUIRE(p != nullptr);
        CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);  // "Pointers are aligned to 512 bytes"
        char* c = static_cast<char*>(p);
        // No live block overlaps another.
        auto after = live.lower_bound(c);
        if (after != live.end()) CHECK(c + size <= after->first);
        if (after != live.begin()) {
          auto before = std::prev(after);
          CHECK(before->first + before->second.size <= c);
        }
        const unsigned char tag = next_tag++;
        if (next_tag == 0) next_tag = 1;
        fill_on(s, p, size, tag);
        live[c] = {size, s, tag};
        live_bytes += size;
        ++allocs;
      } else if (dice < 72 && !live.empty()) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(pick(0, live.size() - 1)));
        // Half the frees on the allocating stream, half on any stream.
        const cudaStream_t s = pick(0, 1) == 0 ? it->second.stream : any_stream();
        op = "free " + std::to_string(it->second.size);
        // As with cudaFreeAsync, the program orders the free after the
        // block's last use: a free on another stream waits for the
        // allocating stream's work (its fill) first.
        if (s != it->second.stream) REQUIRE(sim().stream_synchronize(it->second.stream) == cudaSuccess);
        REQUIRE(sovaFreeAsync(it->first, s) == cudaSuccess);
        live_bytes -= it->second.size;
        live.erase(it);
        ++frees;
      } else if (dice < 82) {
        op = "synchronize";
        const bool all = pick(0, 1) == 0;
        for (cudaStream_t s : streams) {
          if (!all && pick(0, 2) != 0) continue;
          REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
          if (pick(0, 1) == 0) REQUIRE(sovaMemPoolStreamSynchronized(pool, s) == cudaSuccess);
        }
        if (all) {
          // Every block's contents are what its stream wrote: no two live
          // blocks share memory, and no reuse broke stream order.
          for (const auto& [ptr, b] : live) {
            INFO("block of " << b.size << " bytes at " << hex(ptr));
            CHECK(holds(ptr, b.size, b.tag));
          }
        }
      } else if (dice < 88) {
        const std::uint64_t keep = pick(0, 3) == 0 ? 0 : pick(0, 64 * MiB);
        op = "trim to " + std::to_string(keep);
        const std::uint64_t before = core(pool).reservedCurrent;
        REQUIRE(sovaMemPoolTrimTo(pool, keep) == cudaSuccess);
        const sovaMemPoolStats s = stats_of(pool);
        INFO(op << ": reserved " << before << " -> " << s.reservedCurrent << ", used " << s.usedCurrent);
        CHECK(s.reservedCurrent <= before);                  // a trim releases, never grows
        CHECK(s.reservedCurrent >= s.usedCurrent);           // never below what is live
        if (live.empty()) CHECK(s.reservedCurrent <= keep);  // "at most keep stays reserved"
      } else if (dice < 94) {
        switch (pick(0, 3)) {
          case 0: {
            const std::uint64_t values[] = {0, 4 * MiB, 32 * MiB, kNoRelease};
            const std::uint64_t t = values[pick(0, 3)];
            op = "release threshold " + std::to_string(t);
            set_u64(pool, cudaMemPoolAttrReleaseThreshold, t);
            CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == t);
            break;
          }
          default: {
            const cudaMemPoolAttr which[] = {cudaMemPoolReuseFollowEventDependencies,
                                             cudaMemPoolReuseAllowOpportunistic,
                                             cudaMemPoolReuseAllowInternalDependencies};
            const cudaMemPoolAttr a = which[pick(0, 2)];
            const int v = static_cast<int>(pick(0, 2)) * 3;  // 0, 3, 6
            op = "reuse attribute " + std::to_string(a) + " = " + std::to_string(v);
            set_int(pool, a, v);
            // "any non-zero value reads back as 1"
            CHECK(get_int(pool, a) == (v != 0 ? 1 : 0));
            break;
          }
        }
      } else if (dice < 97) {
        op = "reset used high";
        set_u64(pool, cudaMemPoolAttrUsedMemHigh, 0);
        // "reset to the current value"
        CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == live_bytes);
        used_high = live_bytes;
      } else {
        op = "reset reserved high";
        const std::uint64_t r0 = core(pool).reservedCurrent;
        set_u64(pool, cudaMemPoolAttrReservedMemHigh, 0);
        const std::uint64_t h = attr(pool, cudaMemPoolAttrReservedMemHigh);
        const std::uint64_t r1 = attr(pool, cudaMemPoolAttrReservedMemCurrent);
        // Nothing allocates meanwhile; the release worker may only lower
        // reserved: the high is the current value at the reset.
        INFO("reserved " << r0 << " before, high " << h << " after reset, reserved " << r1 << " after");
        CHECK(h <= r0);
        CHECK(h >= r1);
        last_reserved_high = h;
      }
      check();
    }

    // Everything freed, synchronized, trimmed to 0: nothing stays reserved.
    for (const auto& [ptr, b] : live) REQUIRE(sovaFreeAsync(ptr, b.stream) == cudaSuccess);
    frees += live.size();
    live.clear();
    live_bytes = 0;
    for (cudaStream_t s : streams) REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    op = "final trim to 0";
    check();
    CHECK(reserved(pool) == 0);
  }
}

// ---------------------------------------------------------------------------
// High-water marks and used across streams
// ---------------------------------------------------------------------------

TEST_CASE("scenario: used drops at the free, before the stream reaches it", "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3001, pool, s) == cudaSuccess);
  CHECK(used(pool) == 3001);
  {
    Gate busy(s);  // the stream cannot reach the free until the gate opens
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    CHECK(used(pool) == 0);  // docs/c-api.md: "drops at the free, before the stream reaches it"
    CHECK(stats_of(pool).liveBlocks == 0);
  }
}

// cudaMemPoolAttrUsedMemHigh is the runtime's peak of used memory: with two
// streams whose allocations hit the fast path and one thread making the calls,
// the peak of the sum (3 MiB), with no statistics read between the steps
// (docs/design.md, "Statistics").
TEST_CASE("scenario: used high-water mark over two streams is the peak of the sum",
          "[capi][scenario][pool_stats]") {
  // The statistics are read only at the end here (no read between the steps).
  ScopedPool pool;
  ScopedStream a, b;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  // Warm both streams' caches so that the second round can be fast-path only.
  for (int round = 0; round < 2; ++round) {
    void* pa = nullptr;
    void* pb = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&pa, 1 * MiB, pool, a) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&pb, 2 * MiB, pool, b) == cudaSuccess);
    REQUIRE(sovaFreeAsync(pa, a) == cudaSuccess);
    REQUIRE(sovaFreeAsync(pb, b) == cudaSuccess);
    if (round == 0) {
      a.synchronize();
      b.synchronize();
      set_u64(pool, cudaMemPoolAttrUsedMemHigh, 0);
      REQUIRE(attr(pool, cudaMemPoolAttrUsedMemHigh) == 0);
    }
  }
  INFO("both blocks were live at once: the peak of used was 3 MiB (cudaMemPoolAttrUsedMemHigh, as the runtime)");
  CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 3 * MiB);
}

// The same for a pool where a second stream allocated and freed once, long
// before, and only one stream allocates afterwards: the peak after a reset is
// the peak of that stream's round (it read 0 when the mark was exact only
// while the pool had ever had one stream).
TEST_CASE("scenario: used high-water mark after a second stream was seen once is the peak of the round",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream a, b;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* once = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&once, 1 * MiB, pool, b) == cudaSuccess);
  REQUIRE(sovaFreeAsync(once, b) == cudaSuccess);
  for (int round = 0; round < 2; ++round) {
    void* p1 = nullptr;
    void* p2 = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p1, 1 * MiB, pool, a) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&p2, 2 * MiB, pool, a) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p2, a) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p1, a) == cudaSuccess);
    if (round == 0) {
      a.synchronize();
      set_u64(pool, cudaMemPoolAttrUsedMemHigh, 0);
      REQUIRE(attr(pool, cudaMemPoolAttrUsedMemHigh) == 0);
    }
  }
  CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 3 * MiB);
}

// Once a second host thread calls, the mark is the one reached before
// (exact) or the sampled sum, whichever is larger: never below the peak the
// first thread reached, and never above the true peak (docs/design.md,
// "Statistics").
TEST_CASE("scenario: used high-water mark once a second thread calls keeps the first thread's peak",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream a, b;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* p1 = nullptr;
  void* p2 = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p1, 3 * MiB, pool, a) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&p2, 2 * MiB, pool, b) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p1, a) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p2, b) == cudaSuccess);
  cudaError_t allocated = cudaErrorUnknown, freed = cudaErrorUnknown;
  std::thread([&] {  // Catch2's assertions stay on the test's thread
    void* q = nullptr;
    allocated = sovaMallocFromPoolAsync(&q, 1 * MiB, pool, b);
    if (allocated == cudaSuccess) freed = sovaFreeAsync(q, b);
  }).join();
  REQUIRE(allocated == cudaSuccess);
  REQUIRE(freed == cudaSuccess);
  CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 5 * MiB);
}

TEST_CASE("scenario: used high-water mark on one stream is exact without reads between steps",
          "[capi][scenario][pool_stats]") {
  // docs/design.md, "Statistics": "UsedMemHigh is exact for a single stream".
  ScopedPool pool;
  ScopedStream a;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  for (int round = 0; round < 2; ++round) {
    void* p1 = nullptr;
    void* p2 = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p1, 1 * MiB, pool, a) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&p2, 2 * MiB + 5, pool, a) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p2, a) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p1, a) == cudaSuccess);
    if (round == 0) {
      a.synchronize();
      set_u64(pool, cudaMemPoolAttrUsedMemHigh, 0);
      REQUIRE(attr(pool, cudaMemPoolAttrUsedMemHigh) == 0);
    }
  }
  CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 3 * MiB + 5);
}

TEST_CASE("scenario: high-water resets follow the runtime's rules", "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* big = nullptr;
  void* small = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&big, 20 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&small, 1, pool, s) == cudaSuccess);
  CHECK(used(pool) == 20 * MiB + 1);
  REQUIRE(sovaFreeAsync(big, s) == cudaSuccess);
  s.synchronize();
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  const Core before = core(pool);
  INFO("before the resets: " << before);
  CHECK(before.usedCurrent == 1);
  CHECK(before.usedHigh == 20 * MiB + 1);
  CHECK(before.reservedHigh >= 20 * MiB + 1);
  CHECK(before.reservedCurrent < before.reservedHigh);  // the trim released the 20 MiB block's memory

  // Non-zero values: cudaErrorInvalidValue, nothing changes.
  std::uint64_t five = 5;
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &five) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaMemPoolSetAttribute"));
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &five) == cudaErrorInvalidValue);
  CHECK(core(pool) == before);
  // Currents are read-only.
  std::uint64_t zero = 0;
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &zero) == cudaErrorInvalidValue);
  CHECK(core(pool) == before);

  // 0 resets each to its current value, independently.
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero) == cudaSuccess);
  Core now = core(pool);
  CHECK(now.usedHigh == 1);
  CHECK(now.reservedHigh == before.reservedHigh);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero) == cudaSuccess);
  now = core(pool);
  CHECK(now.reservedHigh == before.reservedCurrent);
  CHECK(now.usedHigh == 1);
  // Growing again raises the highs from there.
  REQUIRE(sovaMallocFromPoolAsync(&big, 6 * MiB, pool, s) == cudaSuccess);
  now = core(pool);
  CHECK(now.usedHigh == 6 * MiB + 1);
  CHECK(now.reservedHigh == now.reservedCurrent);
  REQUIRE(sovaFreeAsync(big, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(small, s) == cudaSuccess);
}

TEST_CASE("scenario: attribute calls refused with cudaErrorInvalidValue change nothing",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 5000, pool, s) == cudaSuccess);
  const Core before = core(pool);
  std::uint64_t v = 0;
  const auto bad_attr = static_cast<cudaMemPoolAttr>(999);
  CHECK(sovaMemPoolSetAttribute(pool, bad_attr, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAttribute(pool, bad_attr, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(nullptr, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAttribute(nullptr, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(core(pool) == before);
  CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == kNoRelease);  // the NULL set did not change it
  // ReuseAllowOpportunistic to 7: Success, reads back 1 (runtime-errors.md).
  set_int(pool, cudaMemPoolReuseAllowOpportunistic, 7);
  CHECK(get_int(pool, cudaMemPoolReuseAllowOpportunistic) == 1);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
}

// ---------------------------------------------------------------------------
// Release threshold and trim
// ---------------------------------------------------------------------------

TEST_CASE("scenario: the release threshold is respected once the pool is idle after a synchronize",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  auto burst = [&] {
    std::vector<void*> blocks;
    for (int i = 0; i < 10; ++i) {
      void* p = nullptr;
      REQUIRE(sovaMallocFromPoolAsync(&p, 4 * MiB, pool, s) == cudaSuccess);
      blocks.push_back(p);
    }
    for (void* p : blocks) REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    s.synchronize();
    REQUIRE(sovaMemPoolStreamSynchronized(pool, s) == cudaSuccess);
    CHECK(used(pool) == 0);
  };

  SECTION("threshold 0: everything goes back") {
    burst();
    INFO("README: memory above the threshold goes back once the pool has been idle for about 20-40 ms");
    CHECK(eventually([&] { return reserved(pool) == 0; }));
  }
  SECTION("threshold 12 MiB: what is above goes back") {
    set_u64(pool, cudaMemPoolAttrReleaseThreshold, 12 * MiB);
    burst();
    CHECK(eventually([&] { return reserved(pool) <= 12 * MiB; }));
    INFO("settled at " << reserved(pool) << " bytes");
    // Stays there (no further release below the threshold is required; we
    // only check that it does not grow back).
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(reserved(pool) <= 12 * MiB);
  }
  SECTION("threshold UINT64_MAX: nothing goes back without a trim") {
    set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
    burst();
    const std::uint64_t held = reserved(pool);
    CHECK(held >= 40 * MiB);
    // Several release-worker periods (20 ms): no memory may be released.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    CHECK(reserved(pool) == held);
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);  // "sovaMemPoolTrimTo releases at once"
    CHECK(reserved(pool) == 0);
  }
}

// README.md: "Release threshold (default 0, as the driver): memory above it
// goes back to the device, in whole chunks that fit above it (an idle pool
// keeps at least the threshold and less than one chunk more)"; docs/c-api.md:
// sovaMemPoolTrimTo lets a chunk straddling keep go too.
TEST_CASE("scenario: an idle pool keeps at least the release threshold and less than a chunk more",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  const std::uint64_t threshold = 5 * MiB;
  const std::uint64_t max_chunk = 32 * MiB;  // docs/policies.md: chunks of at most max_chunk (32 MiB)
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, threshold);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 8 * MiB, pool, s) == cudaSuccess);
    blocks.push_back(p);
  }
  REQUIRE(reserved(pool) >= threshold + max_chunk);  // else the bound below could not fail
  for (void* p : blocks) REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  s.synchronize();
  REQUIRE(sovaMemPoolStreamSynchronized(pool, s) == cudaSuccess);
  const bool settled =
      eventually([&] { return reserved(pool) < threshold + max_chunk; }, std::chrono::milliseconds(2000));
  INFO("README: an idle pool keeps at least the threshold (5 MiB) and less than one chunk more; reserved is "
       << reserved(pool));
  CHECK(settled);
  CHECK(reserved(pool) >= threshold);
  // The straddling chunk goes with an explicit trim to the threshold.
  REQUIRE(sovaMemPoolTrimTo(pool, threshold) == cudaSuccess);
  CHECK(reserved(pool) <= threshold);
}

TEST_CASE("scenario: trim keeps live memory and releases down to keep", "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 4 * MiB, pool, s) == cudaSuccess);
    fill_on(s, p, 4 * MiB, static_cast<unsigned char>(0x30 + i));
    blocks.push_back(p);
  }
  // Free every other block: live 16 MiB in four blocks.
  for (int i = 0; i < 8; i += 2) REQUIRE(sovaFreeAsync(blocks[i], s) == cudaSuccess);
  s.synchronize();
  const std::uint64_t before = reserved(pool);
  CHECK(before >= 32 * MiB);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  const Core after = core(pool);
  INFO("reserved " << before << " -> " << after.reservedCurrent);
  CHECK(after.usedCurrent == 16 * MiB);
  CHECK(after.reservedCurrent >= 16 * MiB);  // never below what is live
  CHECK(after.reservedCurrent < before);     // freed blocks' memory went back
  // The live blocks are intact.
  for (int i = 1; i < 8; i += 2) CHECK(holds(blocks[i], 4 * MiB, static_cast<unsigned char>(0x30 + i)));
  for (int i = 1; i < 8; i += 2) REQUIRE(sovaFreeAsync(blocks[i], s) == cudaSuccess);
  s.synchronize();

  // No live block: at most keep stays (docs/c-api.md, sovaMemPoolTrimTo).
  for (std::size_t keep : {std::size_t{24} * MiB, std::size_t{10} * MiB + 1, std::size_t{3} * MiB, std::size_t{0}}) {
    REQUIRE(sovaMemPoolTrimTo(pool, keep) == cudaSuccess);
    INFO("keep " << keep << ": reserved " << reserved(pool));
    CHECK(reserved(pool) <= keep);
  }
  CHECK(reserved(pool) == 0);
}

TEST_CASE("scenario: trim to more than is reserved is a no-op (cudaMemPoolTrimTo)", "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 6 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  s.synchronize();
  const std::uint64_t held = reserved(pool);
  REQUIRE(held >= 6 * MiB);
  // "memory beyond keep that no live block uses is released": none lies beyond.
  REQUIRE(sovaMemPoolTrimTo(pool, held) == cudaSuccess);
  CHECK(reserved(pool) == held);
  REQUIRE(sovaMemPoolTrimTo(pool, held + 100 * MiB) == cudaSuccess);
  CHECK(reserved(pool) == held);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
}

// ---------------------------------------------------------------------------
// Default pools, current pools, created pools
// ---------------------------------------------------------------------------

TEST_CASE("scenario: sovaMallocAsync uses the stream's device's current pool", "[capi][scenario][pool_stats]") {
  const sovaMemPool_t def0 = default_pool(0);
  const sovaMemPool_t def1 = default_pool(1);
  CHECK(def0 != def1);
  sovaMemPool_t again = nullptr;
  REQUIRE(sovaDeviceGetDefaultMemPool(&again, 0) == cudaSuccess);
  CHECK(again == def0);  // one default pool per device, for the process
  sovaMemPool_t cur = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&cur, 0) == cudaSuccess);
  CHECK(cur == def0);

  ScopedStream s0;  // device 0
  const cudaStream_t s1 = sim().create_stream(false, 1);

  // Default pools: each device's allocation lands in its own default pool.
  const std::uint64_t used0 = used(def0), used1 = used(def1);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(sovaMallocAsync(&a, 7000, s0) == cudaSuccess);
  REQUIRE(sovaMallocAsync(&b, 9000, s1) == cudaSuccess);  // current device is 0, the stream's is 1
  CHECK(used(def0) == used0 + 7000);
  CHECK(used(def1) == used1 + 9000);

  // A created pool made current on device 0.
  ScopedPool mine(0);
  REQUIRE(sovaDeviceSetMemPool(0, mine) == cudaSuccess);
  REQUIRE(sovaDeviceGetMemPool(&cur, 0) == cudaSuccess);
  CHECK(cur == mine.get());
  void* c = nullptr;
  REQUIRE(sovaMallocAsync(&c, 11000, s0) == cudaSuccess);
  CHECK(used(mine) == 11000);
  CHECK(used(def0) == used0 + 7000);
  // A pool of device 0 cannot become device 1's: cudaErrorInvalidValue, nothing changes.
  CHECK(sovaDeviceSetMemPool(1, mine) == cudaErrorInvalidValue);
  REQUIRE(sovaDeviceGetMemPool(&cur, 1) == cudaSuccess);
  CHECK(cur == def1);

  // Frees find their pool from the pointer, whatever the stream.
  REQUIRE(sovaFreeAsync(a, s1) == cudaSuccess);  // device 0 block freed on a device 1 stream
  REQUIRE(sovaFreeAsync(b, s0) == cudaSuccess);
  CHECK(used(def0) == used0);
  CHECK(used(def1) == used1);

  // Destroying the current pool (with a live block) makes the default current again.
  const sovaMemPool_t gone = mine.release();
  REQUIRE(sovaMemPoolDestroy(gone) == cudaSuccess);
  REQUIRE(sovaDeviceGetMemPool(&cur, 0) == cudaSuccess);
  CHECK(cur == def0);
  void* d = nullptr;
  REQUIRE(sovaMallocAsync(&d, 13000, s0) == cudaSuccess);
  CHECK(used(def0) == used0 + 13000);
  REQUIRE(sovaFreeAsync(d, s0) == cudaSuccess);
  REQUIRE(sovaFreeAsync(c, s0) == cudaSuccess);  // the destroyed pool's last block
  sim().stream_synchronize(s1);
  sim().destroy_stream(s1);
  // The default pools are never destroyed.
  CHECK(sovaMemPoolDestroy(def0) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(def1) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, def0) == cudaSuccess);
}

TEST_CASE("scenario: destroy with live blocks, then every use of the handle", "[capi][scenario][pool_stats]") {
  ScopedStream s;
  const SimCounters start = sim().counters();
  ScopedPool scoped(0);
  const sovaMemPool_t pool = scoped.release();
  void* p = nullptr;
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&q, 4096, pool, s) == cudaSuccess);
  fill_on(s, p, 3 * MiB, 0x5C);
  s.synchronize();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);

  // "The handle fails everywhere from then on."
  std::uint64_t v = 0;
  sovaMemPoolStats st;
  std::memset(&st, 0x77, sizeof st);
  st.structSize = sizeof st;
  void* r = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&r, 16, pool, s) == cudaErrorInvalidValue);
  CHECK(r == nullptr);
  CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolTrimTo(pool, 0) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetStats(pool, &st) == cudaErrorInvalidValue);
  CHECK(st.reservedCurrent == 0x7777777777777777ull);  // *stats unchanged
  CHECK(sovaMemPoolStreamSynchronized(pool, s) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, pool) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(pool) == cudaErrorInvalidValue);

  // A new pool (perhaps in the same slot) is not reachable through the old handle.
  ScopedPool other(0);
  CHECK(other.get() != pool);
  CHECK(sovaMallocFromPoolAsync(&r, 16, pool, s) == cudaErrorInvalidValue);
  CHECK(used(other) == 0);

  // Live blocks stay valid, contents intact.
  CHECK(holds(p, 3 * MiB, 0x5C));
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);  // double free, pool still alive (q)
  REQUIRE(sovaFreeAsync(q, s) == cudaSuccess);          // the last: releases the pool
  s.synchronize();
  // "memory of a pool already released": cudaErrorInvalidValue.
  CHECK(sovaFreeAsync(q, s) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaFreeAsync: cannot free " + hex(q)));
  // The pool's memory went back to the device (eventually: the release waits
  // for the device's work).
  INFO("SimDriver physical bytes: started at " << start.physical_bytes);
  CHECK(eventually([&] { return sim().counters().physical_bytes <= start.physical_bytes; }));
}

// ---------------------------------------------------------------------------
// Bad input, row by row of docs/runtime-errors.md
// ---------------------------------------------------------------------------

TEST_CASE("scenario: refused allocations and frees change nothing", "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  void* keep = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&keep, 10000, pool, s) == cudaSuccess);
  fill_on(s, keep, 10000, 0xA7);
  s.synchronize();
  Core before = core(pool);

  SECTION("size 0: cudaSuccess and NULL; freeing that NULL: cudaSuccess") {
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, 0, pool, s) == cudaSuccess);
    CHECK(p == nullptr);
    CHECK(sovaFreeAsync(p, s) == cudaSuccess);
    const Core now = core(pool);
    CHECK(now.usedCurrent == before.usedCurrent);
    CHECK(now.liveBlocks == before.liveBlocks);
    CHECK(now.reservedCurrent == before.reservedCurrent);
  }
  SECTION("devPtr NULL: cudaErrorInvalidValue") {
    CHECK(sovaMallocFromPoolAsync(nullptr, 16, pool, s) == cudaErrorInvalidValue);
    CHECK(contains(last(), "sovaMallocFromPoolAsync"));
    CHECK(sovaMallocAsync(nullptr, 16, s) == cudaErrorInvalidValue);
    CHECK(contains(last(), "sovaMallocAsync"));
    CHECK(core(pool) == before);
  }
  SECTION("1 << 50 bytes: cudaErrorMemoryAllocation, NULL, pool unchanged, next allocation works") {
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, std::size_t{1} << 50, pool, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    INFO(last());
    CHECK(contains(last(), "allocating 1125899906842624 bytes failed: cudaErrorMemoryAllocation"));
    Core now = core(pool);
    CHECK(now.failedAllocations == before.failedAllocations + 1);  // "allocations refused (out of memory), ever"
    now.failedAllocations = before.failedAllocations;
    CHECK(now == before);
    REQUIRE(sovaMallocFromPoolAsync(&p, 64, pool, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  SECTION("a size beyond the device (1 GiB + 1): cudaErrorMemoryAllocation") {
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, (std::size_t{1} << 30) + 1, pool, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    Core now = core(pool);
    now.failedAllocations = before.failedAllocations;
    CHECK(now == before);
  }
  SECTION("SIZE_MAX: cudaErrorMemoryAllocation") {
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, SIZE_MAX, pool, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    Core now = core(pool);
    now.failedAllocations = before.failedAllocations;
    CHECK(now == before);
  }
  SECTION("a host pointer: cudaErrorInvalidValue") {
    int on_stack = 0;
    CHECK(sovaFreeAsync(&on_stack, s) == cudaErrorInvalidValue);
    CHECK(contains(last(), "not allocated by sova"));
    std::vector<char> heap(4096);
    CHECK(sovaFreeAsync(heap.data(), s) == cudaErrorInvalidValue);
    CHECK(core(pool) == before);
  }
  SECTION("an interior pointer (p + 256): cudaErrorInvalidValue, block intact") {
    CHECK(sovaFreeAsync(static_cast<char*>(keep) + 256, s) == cudaErrorInvalidValue);
    CHECK(contains(last(), "inside a block allocated at " + hex(keep) + " (10000 bytes); free its start"));
    CHECK(sovaFreeAsync(static_cast<char*>(keep) + 9999, s) == cudaErrorInvalidValue);
    CHECK(core(pool) == before);
    s.synchronize();
    CHECK(holds(keep, 10000, 0xA7));
  }
  SECTION("a double free before a synchronize, and after one: cudaErrorInvalidValue") {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 2 * MiB + 3, pool, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    before = core(pool);
    CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
    CHECK(contains(last(), "sovaFreeAsync: cannot free " + hex(p) + ": already freed"));
    CHECK(core(pool) == before);
    s.synchronize();
    CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
    CHECK(core(pool) == before);
  }
  SECTION("a double free after the address was handed out again frees nothing twice") {
    // Same stream, same size: the freed block is reusable at once.
    void* p = nullptr;
    void* p2 = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 777, pool, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&p2, 777, pool, s) == cudaSuccess);
    if (p2 == p) {
      // The second free of the same address is now a legal free of p2.
      REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
      CHECK(sovaFreeAsync(p2, s) == cudaErrorInvalidValue);
    } else {
      CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
      REQUIRE(sovaFreeAsync(p2, s) == cudaSuccess);
    }
    CHECK(core(pool).usedCurrent == before.usedCurrent);
  }
  SECTION("NULL and garbage pool handles: cudaErrorInvalidValue, no crash") {
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, 16, nullptr, s) == cudaErrorInvalidValue);
    CHECK(p == nullptr);
    // Garbage of every shape, including one with the handle's low bits (0101).
    for (std::uintptr_t g : {std::uintptr_t{0x1}, std::uintptr_t{0x5}, std::uintptr_t{0xdead0005},
                             std::uintptr_t{0x7fffffff0015}, ~std::uintptr_t{0} - 10}) {
      const auto garbage = reinterpret_cast<sovaMemPool_t>(g);
      INFO("handle " << std::hex << g);
      p = reinterpret_cast<void*>(0x1);
      CHECK(sovaMallocFromPoolAsync(&p, 16, garbage, s) == cudaErrorInvalidValue);
      CHECK(p == nullptr);
      std::uint64_t v = 0;
      CHECK(sovaMemPoolGetAttribute(garbage, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolTrimTo(garbage, 0) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolDestroy(garbage) == cudaErrorInvalidValue);
      CHECK(sovaDeviceSetMemPool(0, garbage) == cudaErrorInvalidValue);
      sovaMemPoolStats st;
      std::memset(&st, 0, sizeof st);
      st.structSize = sizeof st;
      CHECK(sovaMemPoolGetStats(garbage, &st) == cudaErrorInvalidValue);
    }
    CHECK(core(pool) == before);
  }
  SECTION("sovaMemPoolGetStats: NULL stats or a structSize short of reservedCurrent") {
    CHECK(sovaMemPoolGetStats(pool, nullptr) == cudaErrorInvalidValue);
    sovaMemPoolStats st;
    std::memset(&st, 0x42, sizeof st);
    st.structSize = offsetof(sovaMemPoolStats, reservedCurrent) + sizeof(std::uint64_t) - 1;
    CHECK(sovaMemPoolGetStats(pool, &st) == cudaErrorInvalidValue);
    CHECK(st.reservedCurrent == 0x4242424242424242ull);
    st.structSize = 0;
    CHECK(sovaMemPoolGetStats(pool, &st) == cudaErrorInvalidValue);
    // Exactly up to reservedCurrent: only that field written.
    std::memset(&st, 0x42, sizeof st);
    st.structSize = offsetof(sovaMemPoolStats, reservedCurrent) + sizeof(std::uint64_t);
    CHECK(sovaMemPoolGetStats(pool, &st) == cudaSuccess);
    CHECK(st.reservedCurrent == before.reservedCurrent);
    CHECK(st.reservedHigh == 0x4242424242424242ull);
  }
  SECTION("a stream the driver can tell is invalid: its error, nothing allocated") {
    const cudaStream_t dead = sim().create_stream();
    sim().destroy_stream(dead);
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, 1000, pool, dead) == cudaErrorInvalidResourceHandle);
    CHECK(p == nullptr);
    Core now = core(pool);
    now.failedAllocations = before.failedAllocations;
    CHECK(now == before);
  }
  CHECK(core(pool).usedCurrent == 10000);
  REQUIRE(sovaFreeAsync(keep, s) == cudaSuccess);
}

TEST_CASE("scenario: sovaMallocAsync on a stream the driver can tell is invalid", "[capi][scenario][pool_stats]") {
  // docs/c-api.md, Allocation: "A stream handle the driver can still tell is
  // invalid gives the driver's error (cudaErrorInvalidResourceHandle) and
  // allocates nothing".
  const sovaMemPool_t def0 = default_pool(0);
  const std::uint64_t before = used(def0);
  const cudaStream_t dead = sim().create_stream();
  sim().destroy_stream(dead);
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocAsync(&p, 1000, dead) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);
  CHECK(used(def0) == before);
}

TEST_CASE("scenario: a pool's maxSize (runtime-errors.md: 32 MiB ok, +48 MiB and 65 MiB refused)",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool(0, 64 * MiB);
  ScopedStream s;
  void* a = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&a, 32 * MiB, pool, s) == cudaSuccess);
  const Core before = core(pool);
  void* b = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&b, 48 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(b == nullptr);
  b = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&b, 65 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(b == nullptr);
  Core now = core(pool);
  CHECK(now.failedAllocations == before.failedAllocations + 2);
  CHECK(now.usedCurrent == before.usedCurrent);
  CHECK(now.liveBlocks == before.liveBlocks);
  CHECK(now.reservedCurrent <= 64 * MiB);
  // Exactly what is left still fits.
  REQUIRE(sovaMallocFromPoolAsync(&b, 32 * MiB, pool, s) == cudaSuccess);
  CHECK(core(pool).reservedCurrent <= 64 * MiB);
  REQUIRE(sovaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(b, s) == cudaSuccess);
}

TEST_CASE("scenario: an exhausted device refuses, changes nothing, and recovers after a free",
          "[capi][scenario][pool_stats]") {
  // Device 1 (1 GiB); other tests' device 1 pools are gone or trimmable.
  REQUIRE(sovaMemPoolTrimTo(default_pool(1), 0) == cudaSuccess);
  ScopedPool pool(1);
  const cudaStream_t s = sim().create_stream(false, 1);
  std::vector<void*> blocks;
  cudaError_t err = cudaSuccess;
  void* p = nullptr;
  for (int i = 0; i < 16 && err == cudaSuccess; ++i) {
    p = reinterpret_cast<void*>(0x1);
    err = sovaMallocFromPoolAsync(&p, 128 * MiB, pool, s);
    if (err == cudaSuccess) blocks.push_back(p);
  }
  INFO(blocks.size() << " blocks of 128 MiB fit on the 1 GiB device");
  CHECK(err == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(!blocks.empty());
  CHECK(blocks.size() <= 8);
  const Core before = core(pool);
  p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&p, 128 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  Core now = core(pool);
  CHECK(now.failedAllocations == before.failedAllocations + 1);
  now.failedAllocations = before.failedAllocations;
  CHECK(now == before);
  // Free one (on another stream of the device), then the same size fits again.
  REQUIRE(!blocks.empty());
  const cudaStream_t t = sim().create_stream(false, 1);
  REQUIRE(sovaFreeAsync(blocks.back(), t) == cudaSuccess);
  blocks.pop_back();
  CHECK(sovaMallocFromPoolAsync(&p, 128 * MiB, pool, s) == cudaSuccess);
  blocks.push_back(p);
  for (void* b : blocks) REQUIRE(sovaFreeAsync(b, s) == cudaSuccess);
  sim().stream_synchronize(s);
  sim().stream_synchronize(t);
  sim().destroy_stream(s);
  sim().destroy_stream(t);
}

TEST_CASE("scenario: device and pool creation rows of runtime-errors.md", "[capi][scenario][pool_stats]") {
  sim();
  sovaMemPool_t q = reinterpret_cast<sovaMemPool_t>(0x1);
  CHECK(sovaDeviceGetDefaultMemPool(&q, 99) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetDefaultMemPool(&q, -1) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetDefaultMemPool(&q, 2) == cudaErrorInvalidDevice);  // the sim has 2 devices
  CHECK(sovaDeviceGetDefaultMemPool(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGetMemPool(&q, 99) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGetMemPool(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(99, default_pool(0)) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(nullptr) == cudaErrorInvalidValue);

  sovaMemPool_t pool = nullptr;
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  CHECK(sovaMemPoolCreate(&pool, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolCreate(nullptr, &props) == cudaErrorInvalidValue);
  props.device = 99;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaMemPoolCreate: device 99 does not exist"));
  props.device = -1;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props = props_on(0);
  props.reserved[47] = 1;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props = props_on(0);
  props.reservedPad[0] = 1;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props = props_on(0);
  props.policy = static_cast<sovaPolicy>(4);
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props = props_on(0);
  props.flags = 0x40;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props.flags = sovaMemPoolNoRemap | sovaMemPoolThoroughRemap;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props = props_on(0);
  props.hostNumaNode = -1;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  props.hostNumaNode = 1;
  CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);

  // Zeroed props: a pool on device 0 (a documented difference).
  std::memset(&props, 0, sizeof props);
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 1, pool, s) == cudaSuccess);
  CHECK(used(pool) == 1);
  // "reserved after first small alloc: one granule (2 MiB)"
  CHECK(reserved(pool) == 2 * MiB);
  void* p2 = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p2, 1, pool, s) == cudaSuccess);
  CHECK(used(pool) == 2);
  CHECK(reinterpret_cast<std::uintptr_t>(p2) % 512 == 0);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p2, s) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(pool) == cudaErrorInvalidValue);
}

TEST_CASE("scenario: a successful call leaves the last error message; each thread has its own",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  ScopedStream s;
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
  const std::string mine = last();
  CHECK(contains(mine, "sovaMemPoolTrimTo"));
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 100, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(last() == mine);
  std::string other_before, other_after;
  std::thread([&] {
    other_before = last();
    int x = 0;
    (void)sovaFreeAsync(&x, s);
    other_after = last();
  }).join();
  CHECK(other_before.empty());
  CHECK(contains(other_after, "not allocated by sova"));
  CHECK(last() == mine);
}

// ---------------------------------------------------------------------------
// Cross-stream reuse must respect stream order
// ---------------------------------------------------------------------------

TEST_CASE("scenario: a block freed on a busy stream is not given to another stream out of order",
          "[capi][scenario][pool_stats]") {
  for (const int internal : {0, 1}) {
    INFO("cudaMemPoolReuseAllowInternalDependencies = " << internal);
    ScopedPool pool;
    ScopedStream a, b;
    set_int(pool, cudaMemPoolReuseAllowInternalDependencies, internal);
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 64 * 1024, pool, a) == cudaSuccess);
    void* q = nullptr;
    {
      Gate busy(a);
      // Stream a writes 0xAA into p after the gate, then frees it.
      fill_on(a, p, 64 * 1024, 0xAA);
      REQUIRE(sovaFreeAsync(p, a) == cudaSuccess);
      REQUIRE(sovaMallocFromPoolAsync(&q, 64 * 1024, pool, b) == cudaSuccess);
      if (internal == 0) {
        // Opportunistic reuse needs the free known complete; it is not
        // (stream a is held): another stream must not get the block.
        CHECK(q != p);
      }
      fill_on(b, q, 64 * 1024, 0xBB);
    }
    a.synchronize();
    b.synchronize();
    // If q reused p, b's write must have waited for a's (internal dependency).
    CHECK(holds(q, 64 * 1024, 0xBB));
    REQUIRE(sovaFreeAsync(q, b) == cudaSuccess);
  }
}

// ---------------------------------------------------------------------------
// Threads sharing a pool
// ---------------------------------------------------------------------------

TEST_CASE("scenario: threads on their own streams share a pool and free each other's blocks",
          "[capi][scenario][pool_stats]") {
  ScopedPool pool;
  constexpr int kThreads = 4;
  constexpr int kSteps = 600;
  std::mutex mailbox_lock;
  std::vector<std::pair<void*, std::size_t>> mailbox;  // blocks handed to any thread to free
  std::atomic<std::uint64_t> allocs{0}, frees{0}, failures{0};
  std::atomic<std::uint64_t> largest{0};
  std::vector<std::string> messages(kThreads);
  // A reader checks each snapshot while the threads run: sovaMemPoolGetStats
  // "Takes the pool's locks briefly; safe while other threads use the pool".
  // Only relations that hold at every instant are checked.
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> bad_snapshots{0}, snapshots{0};
  std::string first_bad;
  std::thread reader([&] {
    while (!done.load()) {
      const sovaMemPoolStats st = stats_of(pool);
      ++snapshots;
      const bool ok =
          st.usedHigh >= st.usedCurrent && st.reservedHigh >= st.reservedCurrent && st.deallocations <= st.allocations;
      if (!ok && bad_snapshots++ == 0)
        first_bad = "used " + std::to_string(st.usedCurrent) + " high " + std::to_string(st.usedHigh) + ", reserved " +
                    std::to_string(st.reservedCurrent) + " high " + std::to_string(st.reservedHigh) + ", allocations " +
                    std::to_string(st.allocations) + " frees " + std::to_string(st.deallocations);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      const cudaStream_t s = sim().create_stream();
      std::vector<std::pair<void*, std::size_t>> mine;
      for (int i = 0; i < kSteps; ++i) {
        const std::uint64_t dice = rng() % 100;
        if (dice < 50 || mine.empty()) {
          const std::size_t size = rng() % 4 == 0 ? 1 + rng() % (4 * MiB) : 1 + rng() % 8192;
          void* p = nullptr;
          if (sovaMallocFromPoolAsync(&p, size, pool, s) != cudaSuccess || p == nullptr) {
            ++failures;
            continue;
          }
          ++allocs;
          std::uint64_t l = largest.load();
          while (size > l && !largest.compare_exchange_weak(l, size)) {
          }
          mine.emplace_back(p, size);
        } else if (dice < 65) {
          std::lock_guard<std::mutex> lock(mailbox_lock);
          mailbox.push_back(mine.back());
          mine.pop_back();
        } else if (dice < 80) {
          std::pair<void*, std::size_t> got{nullptr, 0};
          {
            std::lock_guard<std::mutex> lock(mailbox_lock);
            if (!mailbox.empty()) {
              got = mailbox.back();
              mailbox.pop_back();
            }
          }
          if (got.first != nullptr) {
            if (sovaFreeAsync(got.first, s) != cudaSuccess)
              ++failures;
            else
              ++frees;
          }
        } else {
          if (sovaFreeAsync(mine.back().first, s) != cudaSuccess)
            ++failures;
          else
            ++frees;
          // A refused free on this thread: its own words (each thread has its own message).
          if (i % 50 == 0) {
            int local = 0;
            if (sovaFreeAsync(&local, s) != cudaErrorInvalidValue) ++failures;
            messages[t] = last();
            if (!contains(messages[t], "cannot free " + hex(&local) + ": not allocated by sova")) ++failures;
          }
          mine.pop_back();
        }
        if (i % 97 == 0) sim().stream_synchronize(s);
      }
      for (auto& [p, size] : mine) {
        if (sovaFreeAsync(p, s) != cudaSuccess)
          ++failures;
        else
          ++frees;
      }
      sim().stream_synchronize(s);
      sim().destroy_stream(s);
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  reader.join();
  INFO(snapshots.load() << " snapshots read while the threads ran; first inconsistent one: " << first_bad);
  CHECK(bad_snapshots.load() == 0);
  ScopedStream s;
  for (auto& [p, size] : mailbox) {
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    ++frees;
  }
  s.synchronize();
  CHECK(failures.load() == 0);
  const sovaMemPoolStats st = stats_of(pool);
  CHECK(st.usedCurrent == 0);
  CHECK(st.liveBlocks == 0);
  CHECK(st.allocations == allocs.load());
  CHECK(st.deallocations == frees.load());
  CHECK(allocs.load() == frees.load());
  CHECK(st.failedAllocations == 0);
  CHECK(st.usedHigh >= largest.load());
  CHECK(st.reservedHigh >= st.usedHigh);
  CHECK(st.reservedCurrent <= st.reservedHigh);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(reserved(pool) == 0);
}

TEST_CASE("scenario: the implicit streams name the current device's current pool", "[capi][scenario][pool_stats]") {
  // docs/c-api.md, Allocation: "for 0, cudaStreamLegacy and cudaStreamPerThread,
  // which name a stream of the current device, the current device".
  const sovaMemPool_t def0 = default_pool(0);
  const sovaMemPool_t def1 = default_pool(1);
  const std::uint64_t used0 = used(def0), used1 = used(def1);
  ScopedPool mine1(1);
  {
    sova::test::ScopedCurrentDevice on1(sim(), 1);
    void* a = nullptr;
    void* b = nullptr;
    void* c = nullptr;
    REQUIRE(sovaMallocAsync(&a, 1111, nullptr) == cudaSuccess);
    REQUIRE(sovaMallocAsync(&b, 2222, cudaStreamPerThread) == cudaSuccess);
    CHECK(used(def1) == used1 + 3333);
    CHECK(used(def0) == used0);
    REQUIRE(sovaDeviceSetMemPool(1, mine1) == cudaSuccess);
    REQUIRE(sovaMallocAsync(&c, 4444, cudaStreamLegacy) == cudaSuccess);
    CHECK(used(mine1) == 4444);
    CHECK(used(def1) == used1 + 3333);
    REQUIRE(sovaFreeAsync(a, nullptr) == cudaSuccess);
    REQUIRE(sovaFreeAsync(b, cudaStreamPerThread) == cudaSuccess);
    REQUIRE(sovaFreeAsync(c, nullptr) == cudaSuccess);
    CHECK(used(def1) == used1);
    CHECK(used(mine1) == 0);
    REQUIRE(sovaDeviceSetMemPool(1, def1) == cudaSuccess);
    sim().stream_synchronize(nullptr);
    sim().stream_synchronize(cudaStreamPerThread);
  }
  CHECK(used(def0) == used0);
}

TEST_CASE("scenario: a block freed on another device's stream is released by a trim", "[capi][scenario][pool_stats]") {
  // docs/c-api.md, sovaMemPoolDestroy: "a block may be freed on any device's
  // stream ... such frees become reusable by other streams, and releasable,
  // only after a synchronize of that device, which sovaMemPoolTrimTo, a
  // failing allocation and the release do themselves".
  ScopedPool pool(0);
  ScopedStream s0;
  set_u64(pool, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  const cudaStream_t s1 = sim().create_stream(false, 1);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 6 * MiB, pool, s0) == cudaSuccess);
  fill_on(s0, p, 6 * MiB, 0x11);
  s0.synchronize();
  REQUIRE(sovaFreeAsync(p, s1) == cudaSuccess);
  CHECK(used(pool) == 0);
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(reserved(pool) == 0);
  sim().stream_synchronize(s1);
  sim().destroy_stream(s1);
}

TEST_CASE("scenario: sovaMemPoolGetStats for a caller with a newer, larger struct", "[capi][scenario][pool_stats]") {
  // sova.h: "one built against a newer header keeps its zeros in fields this
  // library lacks".
  ScopedPool pool;
  struct Newer {
    sovaMemPoolStats known;
    std::uint64_t future[8];
  } n;
  std::memset(&n, 0, sizeof n);
  n.known.structSize = sizeof n;
  CHECK(sovaMemPoolGetStats(pool, &n.known) == cudaSuccess);
  for (std::uint64_t f : n.future) CHECK(f == 0);
  CHECK(n.known.structSize == sizeof n);
}

// docs/c-api.md, Allocation: "Out of memory — ... or than what the device has
// free after sova released what it could of this pool's free memory (other
// pools keep theirs: trim them, or give them a release threshold)".
TEST_CASE("scenario: out of memory releases the pool's own free memory, not other pools'",
          "[capi][scenario][pool_stats]") {
  REQUIRE(sovaMemPoolTrimTo(default_pool(1), 0) == cudaSuccess);
  ScopedPool a(1);
  ScopedPool b(1);
  set_u64(a, cudaMemPoolAttrReleaseThreshold, kNoRelease);
  const cudaStream_t s = sim().create_stream(false, 1);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 768 * MiB, a, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  sim().stream_synchronize(s);
  const std::uint64_t held = reserved(a);
  void* q = nullptr;
  INFO("pool a holds " << held << " bytes free on the 1 GiB device");
  CHECK(sovaMallocFromPoolAsync(&q, 512 * MiB, b, s) == cudaErrorMemoryAllocation);
  CHECK(q == nullptr);
  CHECK(reserved(a) == held);  // the other pool keeps its memory
  // Trimmed, pool a's memory is the device's again and pool b gets it.
  REQUIRE(sovaMemPoolTrimTo(a, 0) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&q, 512 * MiB, b, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(q, s) == cudaSuccess);
  sim().stream_synchronize(s);
  sim().destroy_stream(s);
}
