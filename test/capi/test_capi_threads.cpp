// C API under threads: the lock-free fast path, and pool destruction racing
// with frees of the pool's last blocks (the deferred finalization must happen
// exactly once, never while another thread still uses the pool).
#include "capi/capi_test_util.hpp"
#include "capi/read_section.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace sova::capi_test;

TEST_CASE("capi: threads allocate and free concurrently from the current pool", "[capi][threads]") {
  const sovaMemPool_t def = default_pool(0);
  const std::uint64_t used_before = used(def);
  constexpr int kThreads = 8;
  constexpr int kRounds = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &failures] {
      // Each thread on its own per-thread stream, as the _ptsz builds would.
      std::vector<void*> mine;
      for (int i = 0; i < kRounds; ++i) {
        void* p = nullptr;
        const std::size_t size = 256 * (1 + (i * 7 + t) % 16);
        if (sovaMallocAsync_ptsz(&p, size, nullptr) != cudaSuccess || p == nullptr) {
          ++failures;
          continue;
        }
        *static_cast<volatile unsigned char*>(p) = 0;  // host-visible in the sim once mapped
        mine.push_back(p);
        if (mine.size() > 4) {
          if (sovaFreeAsync_ptsz(mine.front(), nullptr) != cudaSuccess) ++failures;
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine)
        if (sovaFreeAsync_ptsz(p, nullptr) != cudaSuccess) ++failures;
      sim().stream_synchronize(cudaStreamPerThread);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures.load() == 0);
  CHECK(used(def) == used_before);
}

TEST_CASE("capi: destroy racing with frees of the last blocks finalizes once", "[capi][threads]") {
  default_pool(0);
  const std::size_t before = sim().counters().reservations;
  constexpr int kThreads = 4;
  constexpr int kBlocksPerThread = 64;
  for (int round = 0; round < 200; ++round) {
    sovaMemPool_t pool = ScopedPool().release();
    ScopedStream s;
    std::vector<std::vector<void*>> blocks(kThreads);
    for (auto& list : blocks) {
      for (int i = 0; i < kBlocksPerThread; ++i) {
        void* p = nullptr;
        REQUIRE(sovaMallocFromPoolAsync(&p, 512 * (1 + i % 8), pool, s) == cudaSuccess);
        list.push_back(p);
      }
    }
    std::atomic<bool> go{false};
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        for (void* p : blocks[t])
          if (sovaFreeAsync(p, cudaStreamPerThread) != cudaSuccess) ++failures;
        sim().stream_synchronize(cudaStreamPerThread);
      });
    }
    go.store(true);
    if (round % 2 == 0) std::this_thread::yield();
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
    for (auto& th : threads) th.join();
    CHECK(failures.load() == 0);
    CHECK(sim().counters().reservations == before);
    // Every pointer is now nobody's.
    CHECK(sovaFreeAsync(blocks[0][0], s) == cudaErrorInvalidValue);
  }
}

TEST_CASE("capi: handle lookups racing with destroy never touch a freed pool", "[capi][threads]") {
  default_pool(0);
  std::atomic<bool> stop{false};
  std::atomic<sovaMemPool_t> shared{nullptr};
  std::atomic<long> lookups{0};
  std::thread reader([&] {
    while (!stop.load()) {
      sovaMemPool_t pool = shared.load();
      std::uint64_t value = 0;
      const cudaError_t err = sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value);
      if (err != cudaSuccess && err != cudaErrorInvalidValue) stop.store(true);
      void* p = nullptr;
      if (sovaMallocFromPoolAsync(&p, 1024, pool, cudaStreamPerThread) == cudaSuccess)
        sovaFreeAsync(p, cudaStreamPerThread);
      ++lookups;
    }
    sim().stream_synchronize(cudaStreamPerThread);
  });
  for (int i = 0; i < 50; ++i) {
    sovaMemPool_t pool = ScopedPool().release();
    shared.store(pool);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
  stop.store(true);
  reader.join();
  CHECK(lookups.load() > 0);
}

TEST_CASE("capi: synchronize_readers waits for a section that has begun", "[capi][threads]") {
  std::atomic<int> phase{0};
  std::atomic<bool> section_over{false};
  std::thread reader([&] {
    sova::capi::ReadSection section;
    phase.store(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    section_over.store(true);
  });
  while (phase.load() != 1) std::this_thread::yield();
  sova::capi::synchronize_readers();
  CHECK(section_over.load());
  reader.join();
  // No section running: returns at once.
  sova::capi::synchronize_readers();
}
