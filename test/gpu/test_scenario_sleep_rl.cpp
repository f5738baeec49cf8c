// [scenario] Sleep and wake as an RL loop uses them (docs/sleep-wake.md): a
// trainer's pool of ~8 GiB of weights in blocks of 1 GiB, 256 MiB,
// 96 MiB + 4100 B, 4 KiB, 777 B, 3 MiB and 64 MiB (repeating), each written with
// its own byte pattern, sleeps with backup beside an inference engine's KV-cache
// pool that sleeps with discard; blocks are freed before and while asleep;
// allocations while asleep are refused with cudaErrorNotPermitted and change
// nothing; right after wake another stream allocates and writes, a trim runs,
// and every kept byte must read back exact on the wake's stream. A decode graph
// captured before the first sleep replays after every wake. Then a wake that
// fails because the device is full, and succeeds once memory is free again.
// Written from the documentation alone. Suite 'gpu' (one GPU).
#include "gpu/scenario_checks.hpp"
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace sova::scenario;

namespace {

const std::vector<std::size_t> kPattern = {kGiB, 256 * kMiB, 96 * kMiB + 4100, 4 * kKiB, 777, 3 * kMiB, 64 * kMiB};

struct Block {
  void* p = nullptr;
  std::size_t n = 0;
  std::uint32_t tag = 0;
  bool live = false;
};

sovaMemPool_t make_pool() {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  // Keep the freed memory until the test trims: the figures compared below
  // must not move under the release worker.
  std::uint64_t keep = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  return pool;
}

int asleep(sovaMemPool_t pool) {
  int flag = -1;
  REQUIRE(sovaMemPoolIsAsleep(pool, &flag) == cudaSuccess);
  return flag;
}

std::uint64_t live_bytes(const std::vector<Block>& blocks) {
  std::uint64_t sum = 0;
  for (const Block& b : blocks)
    if (b.live) sum += b.n;
  return sum;
}

/// Orders `from`'s work so far before `to`'s later work.
void order(cudaStream_t from, cudaStream_t to) {
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, from) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(to, e, 0) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
}

/// Every allocation form refused while `pool` sleeps, changing nothing.
void allocations_refused(sovaMemPool_t pool, cudaStream_t s1, cudaStream_t s2) {
  const Figures before = figures(pool);
  for (std::size_t n : {std::size_t{777}, 4 * kKiB, 96 * kMiB + 4100, kGiB}) {
    for (cudaStream_t s : {s1, s2, cudaStream_t{nullptr}}) {
      CAPTURE(n);
      void* p = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});
      CHECK(sovaMallocFromPoolAsync(&p, n, pool, s) == cudaErrorNotPermitted);
      CHECK(p == nullptr);
    }
  }
  // Through the device's current pool too.
  sovaMemPool_t dflt = nullptr;
  REQUIRE(sovaDeviceGetDefaultMemPool(&dflt, 0) == cudaSuccess);
  REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
  void* p = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});
  CHECK(sovaMallocAsync(&p, 4096, s2) == cudaErrorNotPermitted);
  CHECK(p == nullptr);
  REQUIRE(sovaDeviceSetMemPool(0, dflt) == cudaSuccess);
  CHECK(figures(pool) == before);
}

}  // namespace

TEST_CASE("scenario: sleep/wake in an RL loop, ~8 GiB backed up, a discard pool beside it, frees while asleep",
          "[scenario][sleep]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  bool random_frees = false;
  SECTION("every third block freed while asleep") {}
  SECTION("random frees before the sleep and while asleep") { random_frees = true; }
  CAPTURE(random_frees);
  std::mt19937 rng(random_frees ? 20240611u : 7u);
  constexpr int kCycles = 3;
  Stream s1(0), s2(0);
  Counters wrong(16);  // per cycle: 0+c kept blocks, 4+c s2's blocks, 8+c KV blocks, 12+c the decode graph

  sovaMemPool_t trainer = make_pool();
  sova::PoolOptions kv_options;
  kv_options.release_threshold = UINT64_MAX;
  sova::Pool kv(kv_options);

  // The trainer's weights: the pattern repeated to ~8 GiB, each with its own tag.
  std::vector<Block> w;
  std::uint32_t next_tag = 0x5000;
  for (std::size_t total = 0; total < 8 * kGiB;) {
    for (std::size_t n : kPattern) {
      Block b;
      b.n = n;
      b.tag = next_tag++;
      REQUIRE(sovaMallocFromPoolAsync(&b.p, n, trainer, s1) == cudaSuccess);
      fill(0, b.p, n, b.tag, s1);
      b.live = true;
      w.push_back(b);
      total += n;
    }
  }
  // The KV cache: 1 GiB in 64 MiB blocks, from the C++ pool.
  std::vector<Block> kvb(16);
  for (Block& b : kvb) {
    b.n = 64 * kMiB;
    b.p = kv.allocate(b.n, s2);
    b.live = true;
  }
  const std::size_t kWeights = 1;  // w[1], 256 MiB, read by the decode graph: never freed or rewritten

  // A decode step captured before the first sleep: a temporary from the
  // trainer's pool (graph memory: it sleeps like a live block), the weights read.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  s1.sync();
  REQUIRE(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* tmp = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&tmp, 8 * kMiB + 3, trainer, s2) == cudaSuccess);
  fill(0, tmp, 8 * kMiB + 3, 0xDEC0, s2);
  count_wrong(0, tmp, 8 * kMiB + 3, 0xDEC0, wrong.slot(12), s2);
  count_wrong(0, w[kWeights].p, w[kWeights].n, w[kWeights].tag, wrong.slot(12), s2);
  REQUIRE(sovaFreeAsync(tmp, s2) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(s2, &graph) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s2) == cudaSuccess);
  s2.sync();
  REQUIRE(wrong.read(12) == 0);

  // Pin the backup ahead, once the pool holds what it will back up (docs:
  // "reserve_sleep_backup(reserved_current)"; live bytes only fall from here).
  const std::uint64_t reserved0 = stats(trainer).reservedCurrent;
  REQUIRE(reserved0 >= live_bytes(w));
  REQUIRE(sovaMemPoolReserveSleepBackup(trainer, reserved0) == cudaSuccess);
  const std::uint64_t host_pinned = stats(trainer).sleepHostBytes;
  CHECK(host_pinned >= reserved0);

  std::vector<Block> s2_blocks;  // what the inference side allocates right after wake
  for (int cycle = 0; cycle < kCycles; ++cycle) {
    CAPTURE(cycle);
    // Random frees before the sleep, on either stream.
    if (random_frees) {
      order(s1, s2);
      for (std::size_t i = 0; i < w.size(); ++i) {
        if (i == kWeights || !w[i].live || rng() % 8 != 0) continue;
        REQUIRE(sovaFreeAsync(w[i].p, rng() % 2 ? s1 : s2) == cudaSuccess);
        w[i].live = false;
      }
    }
    // The inference side used the KV cache and its own blocks; done: freed,
    // and its stream ordered before the sleep's (the caller's rule).
    for (Block& b : kvb) fill(0, b.p, b.n, 0x4B00 + cycle, s2);
    for (Block& b : s2_blocks) REQUIRE(sovaFreeAsync(b.p, s2) == cudaSuccess);
    s2_blocks.clear();
    order(s2, s1);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(sovaMemPoolTrimTo(trainer, 0) == cudaSuccess);
    kv.trim_to(0);
    const std::uint64_t reserved_before = stats(trainer).reservedCurrent;
    const std::uint64_t kv_reserved_before = kv.stats().reserved_current;
    const std::size_t free_before = free_memory(0);

    // Sleep: the trainer with backup, the KV cache dropped.
    REQUIRE(sovaMemPoolSleep(trainer, sovaSleepBackup, s1) == cudaSuccess);
    REQUIRE(kv.sleep(sova::SleepMode::discard, s1) == cudaSuccess);
    CHECK(asleep(trainer) == 1);
    CHECK(kv.asleep());
    const sovaMemPoolStats st = stats(trainer);
    CHECK(st.asleepBytes == reserved_before);
    CHECK(st.sleepHostBytes == host_pinned);  // pinned ahead: the sleep pinned nothing more
    CHECK(kv.stats().sleep_host_bytes == 0);  // discard: no backup
    // "The device's free memory grows by what the pool held."
    const std::size_t free_asleep = free_memory(0);
    CHECK(free_asleep + 128 * kMiB >= free_before + reserved_before + kv_reserved_before);
    // Asleep already: success, nothing changes.
    CHECK(sovaMemPoolSleep(trainer, sovaSleepBackup, s1) == cudaSuccess);
    CHECK(stats(trainer).asleepBytes == reserved_before);

    allocations_refused(trainer, s1, s2);
    void* refused = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});
    CHECK(kv.try_allocate(&refused, kMiB, s2) == cudaErrorNotPermitted);
    try {
      kv.allocate(kMiB, s2);
      FAIL("Pool::allocate while asleep did not throw");
    } catch (const sova::Error& e) {
      CHECK(e.error() == cudaErrorNotPermitted);
    }

    // Frees while asleep: accepted and final; the used figure drops by the
    // requested bytes at once.
    const std::uint64_t used_asleep = stats(trainer).usedCurrent;
    std::uint64_t freed_asleep = 0;
    std::size_t k = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (i == kWeights || !w[i].live) continue;
      const bool free_it = random_frees ? rng() % 4 == 0 : (k++ % 3 == 2);
      if (!free_it) continue;
      REQUIRE(sovaFreeAsync(w[i].p, i % 2 ? s1 : s2) == cudaSuccess);
      w[i].live = false;
      freed_asleep += w[i].n;
      CHECK(sovaFreeAsync(w[i].p, s1) == cudaErrorInvalidValue);
    }
    CHECK(stats(trainer).usedCurrent == used_asleep - freed_asleep);
    CHECK(asleep(trainer) == 1);

    // Wake, and at once: another stream allocates and writes, a trim runs.
    REQUIRE(sovaMemPoolWake(trainer, s1) == cudaSuccess);
    REQUIRE(kv.wake(s1) == cudaSuccess);
    CHECK(asleep(trainer) == 0);
    CHECK_FALSE(kv.asleep());
    CHECK(stats(trainer).reservedCurrent == reserved_before);  // what it held before the sleep
    CHECK(stats(trainer).asleepBytes == 0);
    CHECK(sovaMemPoolWake(trainer, s1) == cudaSuccess);  // awake already: nothing
    std::uint32_t s2_tag = 0x7000 + 0x100 * static_cast<std::uint32_t>(cycle);
    for (std::size_t n : {96 * kMiB + 4100, 3 * kMiB, std::size_t{777}, 4 * kKiB, 64 * kMiB, 256 * kMiB}) {
      Block b;
      b.n = n;
      b.tag = s2_tag++;
      REQUIRE(sovaMallocFromPoolAsync(&b.p, n, trainer, s2) == cudaSuccess);
      fill(0, b.p, n, b.tag, s2);
      s2_blocks.push_back(b);
    }
    REQUIRE(sovaMemPoolTrimTo(trainer, 0) == cudaSuccess);
    kv.trim_to(0);

    // Every kept byte, on the wake's stream.
    for (const Block& b : w)
      if (b.live) count_wrong(0, b.p, b.n, b.tag, wrong.slot(0 + cycle), s1);
    // The KV cache is usable again (its contents were dropped).
    for (Block& b : kvb) {
      fill(0, b.p, b.n, 0x4BFF, s1);
      count_wrong(0, b.p, b.n, 0x4BFF, wrong.slot(8 + cycle), s1);
    }
    // The decode graph captured before the first sleep replays.
    order(s1, s2);
    for (int i = 0; i < 3; ++i) REQUIRE(cudaGraphLaunch(exec, s2) == cudaSuccess);
    count_wrong(0, w[kWeights].p, w[kWeights].n, w[kWeights].tag, wrong.slot(12 + cycle), s2);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    // s2's blocks kept what s2 wrote: the restore wrote live blocks only.
    for (const Block& b : s2_blocks) count_wrong(0, b.p, b.n, b.tag, wrong.slot(4 + cycle), s2);
    s2.sync();
    CHECK(wrong.read(0 + cycle) == 0);
    CHECK(wrong.read(4 + cycle) == 0);
    CHECK(wrong.read(8 + cycle) == 0);
    CHECK(wrong.read(12 + cycle) == 0);

    // The training step: some weights rewritten, one freed and allocated anew.
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (i == kWeights || !w[i].live || rng() % 5 != 0) continue;
      w[i].tag += 0x10000;
      fill(0, w[i].p, w[i].n, w[i].tag, s1);
    }
    for (Block& b : w) {
      if (b.live || b.n > 96 * kMiB + 4100) continue;
      REQUIRE(sovaMallocFromPoolAsync(&b.p, b.n, trainer, s1) == cudaSuccess);
      b.tag += 0x20000;
      fill(0, b.p, b.n, b.tag, s1);
      b.live = true;
      break;
    }
  }

  // Tear down: nothing left asleep, all memory back.
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  for (Block& b : s2_blocks) REQUIRE(sovaFreeAsync(b.p, s2) == cudaSuccess);
  for (Block& b : w)
    if (b.live) REQUIRE(sovaFreeAsync(b.p, s1) == cudaSuccess);
  for (Block& b : kvb) kv.deallocate(b.p, s2);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(poll([&] { return stats(trainer).usedCurrent == 0 && stats(trainer).liveBlocks == 0; }));
  CHECK(sovaMemPoolReleaseSleepHostMemory(trainer) == cudaSuccess);
  CHECK(stats(trainer).sleepHostBytes == 0);
  REQUIRE(sovaMemPoolTrimTo(trainer, 0) == cudaSuccess);
  CHECK(stats(trainer).reservedCurrent == 0);
  REQUIRE(sovaMemPoolDestroy(trainer) == cudaSuccess);
}

TEST_CASE("scenario: a wake that fails for want of device memory leaves the pool asleep; it wakes intact later",
          "[scenario][sleep]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s1(0), s2(0);
  Counters wrong(2);
  sovaMemPool_t pool = make_pool();
  std::vector<Block> w;
  std::uint32_t tag = 0x900;
  for (std::size_t n : {kGiB, std::size_t{777}, 96 * kMiB + 4100, 3 * kMiB, 512 * kMiB, 4 * kKiB}) {
    Block b;
    b.n = n;
    b.tag = tag++;
    REQUIRE(sovaMallocFromPoolAsync(&b.p, n, pool, s1) == cudaSuccess);
    fill(0, b.p, n, b.tag, s1);
    b.live = true;
    w.push_back(b);
  }
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, s1) == cudaSuccess);
  REQUIRE(asleep(pool) == 1);
  const std::uint64_t asleep_bytes = stats(pool).asleepBytes;
  REQUIRE(asleep_bytes >= kGiB + 512 * kMiB);

  // Fill the device with cudaMalloc until less than a quarter of what the pool
  // needs is free.
  std::vector<void*> filler;
  std::size_t chunk = kGiB;
  while (free_memory(0) > asleep_bytes / 4 && chunk >= 2 * kMiB) {
    void* f = nullptr;
    if (cudaMalloc(&f, chunk) == cudaSuccess) {
      filler.push_back(f);
    } else {
      cudaGetLastError();
      chunk /= 2;
    }
  }
  REQUIRE(free_memory(0) < asleep_bytes / 4);
  const std::size_t free_full = free_memory(0);

  CHECK(sovaMemPoolWake(pool, s1) == cudaErrorMemoryAllocation);
  CHECK(asleep(pool) == 1);
  CHECK(stats(pool).asleepBytes == asleep_bytes);
  // "everything wake made is undone": the device's free memory as before.
  CHECK(free_memory(0) + 8 * kMiB >= free_full);
  allocations_refused(pool, s1, s2);
  // A free while asleep still works after the failed wake.
  REQUIRE(sovaFreeAsync(w[1].p, s2) == cudaSuccess);
  w[1].live = false;
  // And a second failed wake changes nothing either.
  CHECK(sovaMemPoolWake(pool, s1) == cudaErrorMemoryAllocation);
  CHECK(asleep(pool) == 1);

  for (void* f : filler) REQUIRE(cudaFree(f) == cudaSuccess);
  REQUIRE(sovaMemPoolWake(pool, s1) == cudaSuccess);
  CHECK(asleep(pool) == 0);
  for (const Block& b : w)
    if (b.live) count_wrong(0, b.p, b.n, b.tag, wrong.slot(0), s1);
  // Allocation works again, on another stream, right away.
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 777, pool, s2) == cudaSuccess);
  fill(0, p, 777, 0x777, s2);
  count_wrong(0, p, 777, 0x777, wrong.slot(1), s2);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(wrong.read(0) == 0);
  CHECK(wrong.read(1) == 0);
  REQUIRE(sovaFreeAsync(p, s2) == cudaSuccess);
  for (Block& b : w)
    if (b.live) REQUIRE(sovaFreeAsync(b.p, s1) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
