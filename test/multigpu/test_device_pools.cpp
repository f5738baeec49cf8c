// Several devices through the C API (sova.h), on real GPUs: each device's
// default pool, pools used from threads whose current device is another,
// frees on another device's stream, trim and idle release per device, and
// out of memory on one device while the other works.
#include "multigpu/require_devices.hpp"
#include "support/capi_stats.hpp"

#include <sova/sova.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

using namespace sova::multigpu;
using sova::test::stats_of;

namespace {

/// A pool of `device` destroyed at scope exit.
struct OwnedPool {
  sovaMemPool_t pool = nullptr;
  explicit OwnedPool(int device, size_t max_size = 0) {
    sovaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.device = device;
    props.maxSize = max_size;
    REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  }
  ~OwnedPool() { sovaMemPoolDestroy(pool); }
  operator sovaMemPool_t() const { return pool; }
};

}  // namespace

TEST_CASE("multigpu: each device has its own default pool, and its blocks live on that device", "[multigpu]") {
  SOVA_REQUIRE_DEVICES(2);
  const int n = device_count();
  std::vector<sovaMemPool_t> pools(n, nullptr);
  for (int d = 0; d < n; ++d) {
    REQUIRE(sovaDeviceGetDefaultMemPool(&pools[d], d) == cudaSuccess);
    sovaMemPool_t current = nullptr;
    REQUIRE(sovaDeviceGetMemPool(&current, d) == cudaSuccess);
    CHECK(current == pools[d]);
    for (int e = 0; e < d; ++e) CHECK(pools[e] != pools[d]);
  }
  sovaMemPool_t none = nullptr;
  CHECK(sovaDeviceGetDefaultMemPool(&none, n) == cudaErrorInvalidDevice);
  // A pool of device 0 cannot become device 1's current pool.
  CHECK(sovaDeviceSetMemPool(1, pools[0]) == cudaErrorInvalidValue);

  for (int d = 0; d < n; ++d) {
    INFO("device " << d);
    DeviceStream s(d);
    CurrentDevice current(d);
    void* p = nullptr;
    // sovaMallocAsync: the current device's pool.
    REQUIRE(sovaMallocAsync(&p, 8 * kMiB, s) == cudaSuccess);
    CHECK(pointer_device(p) == d);
    fill(p, 8 * kMiB, 0xD0D0'0000u + d, s);
    CHECK(count_wrong(p, 8 * kMiB, 0xD0D0'0000u + d, s) == 0);
    CHECK(stats_of(pools[d]).liveBlocks >= 1);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
}

TEST_CASE("multigpu: a device-1 pool serves device-1 streams with device 0 current, from many threads",
          "[multigpu][threads]") {
  SOVA_REQUIRE_DEVICES(2);
  OwnedPool pool0(0), pool1(1);
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::atomic<int> errors{0}, wrong_device{0}, wrong_data{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads have device 0 current, half device 1; each uses
      // both pools, each on a stream of the pool's device.
      const int current_device = t % 2;
      CurrentDevice current(current_device);
      DeviceStream s0(0), s1(1);
      for (int r = 0; r < kRounds; ++r) {
        for (int d = 0; d < 2; ++d) {
          const DeviceStream& s = d == 0 ? s0 : s1;
          void* p = nullptr;
          const size_t bytes = (size_t{1} << (12 + (r + t) % 10));  // 4 KiB .. 2 MiB
          if (sovaMallocFromPoolAsync(&p, bytes, d == 0 ? pool0.pool : pool1.pool, s) != cudaSuccess) {
            ++errors;
            continue;
          }
          if (pointer_device(p) != d) ++wrong_device;
          const std::uint32_t tag = 0x7000'0000u + static_cast<std::uint32_t>(t * 1000 + r);
          fill(p, bytes, tag, s);
          if (r % 50 == 0 && count_wrong(p, bytes, tag, s) != 0) ++wrong_data;
          if (sovaFreeAsync(p, s) != cudaSuccess) ++errors;
        }
      }
      int still_current = -1;
      cudaGetDevice(&still_current);
      if (still_current != current_device) ++errors;  // sova never changes the caller's device
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(errors.load() == 0);
  CHECK(wrong_device.load() == 0);
  CHECK(wrong_data.load() == 0);
  CHECK(stats_of(pool0).liveBlocks == 0);
  CHECK(stats_of(pool1).liveBlocks == 0);
  CHECK(stats_of(pool1).allocations == kThreads * kRounds);
}

TEST_CASE("multigpu: a block freed on another device's stream is not reused before that stream's work is done",
          "[multigpu][cross_device_free]") {
  SOVA_REQUIRE_DEVICES(2);
  OwnedPool pool1(1);
  const cudaMemAccessDesc rw0 = access_desc(0, cudaMemAccessFlagsProtReadWrite);
  REQUIRE(sovaMemPoolSetAccess(pool1, &rw0, 1) == cudaSuccess);
  DeviceStream s0(0), s1(1);
  constexpr size_t kBytes = 16 * kMiB;
  unsigned long long* wrong = nullptr;
  {
    CurrentDevice current(0);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&wrong), sizeof *wrong) == cudaSuccess);
    REQUIRE(cudaMemset(wrong, 0, sizeof *wrong) == cudaSuccess);
  }
  for (int round = 0; round < 4; ++round) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, kBytes, pool1, s1) == cudaSuccess);
    fill(p, kBytes, 0xF1F1'0000u + round, s1);
    s1.synchronize();
    // Device 0 reads the block late, then frees it on its own stream.
    spin(s0, std::chrono::milliseconds(100));
    count_wrong_async(p, kBytes, 0xF1F1'0000u + round, wrong, s0);
    REQUIRE(sovaFreeAsync(p, s0) == cudaSuccess);
    // Device 1 asks for the same size at once and overwrites what it gets.
    void* q = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&q, kBytes, pool1, s1) == cudaSuccess);
    fill(q, kBytes, 0xBAD0'0000u, s1);
    REQUIRE(sovaFreeAsync(q, s1) == cudaSuccess);
    s0.synchronize();
    s1.synchronize();
  }
  unsigned long long host = 1;
  REQUIRE(cudaMemcpy(&host, wrong, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(host == 0);  // device 0 never saw device 1's later writes
  CurrentDevice current(0);
  cudaFree(wrong);
}

TEST_CASE("multigpu: trim and idle release work on each device alone", "[multigpu][release]") {
  SOVA_REQUIRE_DEVICES(2);
  OwnedPool pool0(0), pool1(1);
  DeviceStream s0(0), s1(1);
  constexpr size_t kBytes = 512 * kMiB;
  // kBytes from each pool on its device's stream, freed there, both streams waited for.
  auto allocate_and_free_on_both = [&] {
    void* p0 = nullptr;
    void* p1 = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p0, kBytes, pool0, s0) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&p1, kBytes, pool1, s1) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p0, s0) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p1, s1) == cudaSuccess);
    s0.synchronize();
    s1.synchronize();
  };
  allocate_and_free_on_both();
  CHECK(stats_of(pool0).reservedCurrent >= kBytes);
  CHECK(stats_of(pool1).reservedCurrent >= kBytes);
  const size_t free1 = free_memory(1);

  // Trimming device 0's pool releases device 0's memory, not device 1's.
  REQUIRE(sovaMemPoolTrimTo(pool0, 0) == cudaSuccess);
  CHECK(stats_of(pool0).reservedCurrent == 0);
  CHECK(stats_of(pool1).reservedCurrent >= kBytes);
  CHECK(free_memory(1) <= free1 + 2 * kMiB);
  REQUIRE(sovaMemPoolTrimTo(pool1, 0) == cudaSuccess);
  CHECK(stats_of(pool1).reservedCurrent == 0);
  CHECK(free_memory(1) >= free1 + kBytes - 2 * kMiB);

  // Idle release (threshold 0): each pool gives its memory back by itself.
  std::uint64_t zero = 0;
  REQUIRE(sovaMemPoolSetAttribute(pool0, cudaMemPoolAttrReleaseThreshold, &zero) == cudaSuccess);
  REQUIRE(sovaMemPoolSetAttribute(pool1, cudaMemPoolAttrReleaseThreshold, &zero) == cudaSuccess);
  allocate_and_free_on_both();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((stats_of(pool0).reservedCurrent != 0 || stats_of(pool1).reservedCurrent != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(stats_of(pool0).reservedCurrent == 0);
  CHECK(stats_of(pool1).reservedCurrent == 0);
}

TEST_CASE("multigpu: out of memory on device 1 does not wait for device 0's work, and device 0 keeps allocating",
          "[multigpu][oom]") {
  SOVA_REQUIRE_DEVICES(2);
  OwnedPool pool0(0), pool1(1);
  DeviceStream s0(0), s1(1);
  // Fill device 1 in 4 GiB blocks until the device says no.
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) {
    void* p = nullptr;
    const cudaError_t err = sovaMallocFromPoolAsync(&p, 4 * kGiB, pool1, s1);
    if (err != cudaSuccess) {
      CHECK(err == cudaErrorMemoryAllocation);
      CHECK(p == nullptr);
      break;
    }
    blocks.push_back(p);
  }
  REQUIRE(!blocks.empty());
  REQUIRE(blocks.size() < 64);
  const sovaMemPoolStats before = stats_of(pool1);

  // Device 0 busy for 3 s; device 1's next failure is reported without
  // waiting for it (a device synchronize of device 1 only, if any).
  spin(s0, std::chrono::seconds(3));
  const auto t0 = std::chrono::steady_clock::now();
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&p, 4 * kGiB, pool1, s1) == cudaErrorMemoryAllocation);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(p == nullptr);
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(took).count() < 1500);
  const sovaMemPoolStats after = stats_of(pool1);
  CHECK(after.reservedCurrent == before.reservedCurrent);
  CHECK(after.liveBlocks == before.liveBlocks);
  CHECK(after.failedAllocations == before.failedAllocations + 1);
  // The stream of device 0 is still busy, and device 0's pool still serves it.
  CHECK(cudaStreamQuery(s0) == cudaErrorNotReady);
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&q, 1 * kGiB, pool0, s0) == cudaSuccess);
  CHECK(pointer_device(q) == 0);
  REQUIRE(sovaFreeAsync(q, s0) == cudaSuccess);

  for (void* b : blocks) REQUIRE(sovaFreeAsync(b, s1) == cudaSuccess);
  s1.synchronize();
  REQUIRE(sovaMemPoolTrimTo(pool1, 0) == cudaSuccess);
  CHECK(stats_of(pool1).reservedCurrent == 0);
}
