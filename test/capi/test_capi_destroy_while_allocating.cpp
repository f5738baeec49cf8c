// C API: a pool destroyed while other threads allocate from it.
// Each racing allocation either gets a block, which stays valid and intact
// until it is freed, or cudaErrorInvalidValue (the handle is gone); frees of
// the blocks handed out succeed, and the last one finalizes the pool exactly
// once (its VA reservation goes, whatever the interleaving). Threads that
// allocate through the device's current pool fall back to the default pool
// when the destroyed pool was current.
#include "capi/capi_test_util.hpp"

#include <atomic>
#include <thread>
#include <vector>

using namespace sova::capi_test;

TEST_CASE("capi: a pool destroyed while threads allocate from it", "[capi][threads][issue17]") {
  const sovaMemPool_t def = default_pool(0);
  const std::size_t reservations = sim().counters().reservations;
  constexpr int kThreads = 4;
  constexpr int kRounds = 12;
  std::atomic<int> wrong_errors{0};
  std::atomic<int> bad_data{0};
  std::atomic<int> bad_frees{0};
  std::atomic<long> from_pool{0};
  std::atomic<long> refused{0};
  for (int round = 0; round < kRounds; ++round) {
    sovaMemPool_t pool = ScopedPool().release();
    const bool current = round % 2 == 1;  // odd rounds: also the device's current pool
    if (current) REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
    std::atomic<bool> go{false};
    std::atomic<bool> destroyed{false};
    std::atomic<int> started{0};  // blocks handed out this round
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::pair<void*, unsigned char>> mine;
        while (!go.load()) std::this_thread::yield();
        // Allocate until the destroy has certainly happened, and a little more.
        for (int i = 0, after = 0; after < 8 && i < 500; ++i) {
          if (destroyed.load()) ++after;
          const unsigned char tag = static_cast<unsigned char>(1 + t * 16 + i % 16);
          void* p = nullptr;
          const cudaError_t error = (t % 2 == 1 && current)
                                        ? sovaMallocAsync(&p, 512 * (1 + i % 8), cudaStreamPerThread)
                                        : sovaMallocFromPoolAsync(&p, 512 * (1 + i % 8), pool, cudaStreamPerThread);
          if (error == cudaSuccess && p != nullptr) {
            fill_on(cudaStreamPerThread, p, 512, tag);
            mine.emplace_back(p, tag);
            ++from_pool;
            ++started;
          } else if (error == cudaErrorInvalidValue && p == nullptr) {
            ++refused;
          } else {
            ++wrong_errors;
          }
        }
        sim().stream_synchronize(cudaStreamPerThread);
        for (auto [p, tag] : mine) {
          if (!holds(p, 512, tag)) ++bad_data;
          if (sovaFreeAsync(p, cudaStreamPerThread) != cudaSuccess) ++bad_frees;
        }
        sim().stream_synchronize(cudaStreamPerThread);
      });
    }
    go.store(true);
    // Destroy at once, or once the threads are in full swing.
    while (round % 3 != 0 && started.load() < kThreads * (round % 3) * 4) std::this_thread::yield();
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
    destroyed.store(true);
    for (auto& th : threads) th.join();
    // Every block was freed: the pool is gone, and the default is current again.
    CHECK(sim().counters().reservations == reservations);
    sovaMemPool_t now = nullptr;
    REQUIRE(sovaDeviceGetMemPool(&now, 0) == cudaSuccess);
    CHECK(now == def);
  }
  CHECK(wrong_errors.load() == 0);
  CHECK(bad_data.load() == 0);
  CHECK(bad_frees.load() == 0);
  CHECK(refused.load() > 0);  // the race was run: allocations after the destroy were refused
  INFO("blocks handed out " << from_pool.load() << ", refused " << refused.load());
  CHECK(from_pool.load() > 0);
}
