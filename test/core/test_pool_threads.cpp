// Many host threads, each with its own stream, allocating and freeing at
// once; a share of the blocks is freed by another thread on another stream.
// A cookie is written into every block and checked before its free: two
// owners of one block show up as a wrong cookie.
#include "core/sim_pool_fixture.hpp"

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

struct Handoff {
  std::mutex mutex;
  std::vector<std::pair<void*, std::size_t>> blocks;
};

}  // namespace

TEST_CASE("threads with their own streams never share a live block", "[core][threads]") {
  SimDriver sim(small_sim(std::size_t{512} << 20));
  Pool pool(options_on(sim));
  constexpr int kThreads = 8;
  constexpr int kSteps = 4000;
  std::vector<cudaStream_t> streams;
  for (int t = 0; t < kThreads; ++t) streams.push_back(sim.create_stream());
  Handoff handoff;
  std::atomic<int> bad_cookies{0};
  std::atomic<int> bad_frees{0};

  auto worker = [&](int t) {
    std::mt19937 rng(1000 + t);
    std::vector<std::pair<void*, std::size_t>> mine;
    const auto cookie_of = [](void* p) { return static_cast<unsigned char>(reinterpret_cast<std::uintptr_t>(p) >> 9); };
    auto check_and_free = [&](void* p, std::size_t bytes) {
      const auto* data = static_cast<const unsigned char*>(p);
      if (data[0] != cookie_of(p) || data[bytes - 1] != cookie_of(p)) bad_cookies.fetch_add(1);
      if (pool.try_deallocate(p, streams[t]) != cudaSuccess) bad_frees.fetch_add(1);
    };
    for (int step = 0; step < kSteps; ++step) {
      const int action = static_cast<int>(rng() % 10);
      if (action < 5 || mine.empty()) {
        const std::size_t bytes = 1 + rng() % (rng() % 8 == 0 ? (1 << 20) : 8192);
        void* p = nullptr;
        if (pool.try_allocate(&p, bytes, streams[t]) != cudaSuccess) continue;
        std::memset(p, cookie_of(p), bytes);
        mine.emplace_back(p, bytes);
      } else if (action < 8) {
        const std::size_t i = rng() % mine.size();
        check_and_free(mine[i].first, mine[i].second);
        mine[i] = mine.back();
        mine.pop_back();
      } else if (action < 9) {
        // Hand one to whoever comes next: freed on another thread and stream.
        std::lock_guard<std::mutex> lock(handoff.mutex);
        handoff.blocks.push_back(mine.back());
        mine.pop_back();
      } else {
        std::pair<void*, std::size_t> taken{nullptr, 0};
        {
          std::lock_guard<std::mutex> lock(handoff.mutex);
          if (!handoff.blocks.empty()) {
            taken = handoff.blocks.back();
            handoff.blocks.pop_back();
          }
        }
        if (taken.first != nullptr) check_and_free(taken.first, taken.second);
      }
    }
    for (auto& b : mine) check_and_free(b.first, b.second);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  for (auto& b : handoff.blocks) REQUIRE(pool.try_deallocate(b.first, nullptr) == cudaSuccess);

  CHECK(bad_cookies.load() == 0);
  CHECK(bad_frees.load() == 0);
  const PoolStats stats = pool.stats();
  CHECK(stats.used_current == 0);
  CHECK(stats.live_blocks == 0);
  CHECK(stats.allocations == stats.deallocations);
  pool.check_invariants();
  sim.device_synchronize(0);
  pool.trim_to(0);
  CHECK(reserved_of(pool) == 0);
  for (cudaStream_t s : streams) sim.destroy_stream(s);
}

TEST_CASE("the legacy stream, the per-thread stream and 0 are told apart correctly", "[core][streams]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  // 0 and cudaStreamLegacy are one stream: a block freed on one is reused at once by the other.
  void* a = pool.allocate(4096, nullptr);
  pool.deallocate(a, cudaStreamLegacy);
  CHECK(pool.allocate(4096, nullptr) == a);
  // cudaStreamPerThread is another stream, one per thread.
  void* mine = pool.allocate(8192, cudaStreamPerThread);
  pool.deallocate(mine, cudaStreamPerThread);
  CHECK(pool.allocate(8192, cudaStreamPerThread) == mine);
  pool.deallocate(mine, cudaStreamPerThread);
  void* theirs = nullptr;
  std::thread([&] { theirs = pool.allocate(8192, cudaStreamPerThread); }).join();
  // The other thread's per-thread stream must not take this thread's pending
  // free without ordering: it was handed other memory or the free was complete.
  CHECK(theirs != nullptr);
  pool.deallocate(theirs, cudaStreamPerThread);
  pool.deallocate(a, nullptr);
  pool.check_invariants();
}

TEST_CASE("a stream that frees what another allocates does not make the pool grow without bound", "[core][streams]") {
  // The replay's two-stream trace, as a loop: stream A allocates, stream B
  // (legacy, then a created one) frees some of A's blocks. B's frees return to
  // A only through fences; before foreign frees were fenced sooner (and A's
  // own complete frees made safe so they coalesce) the pool grew by megabytes
  // per thousand rounds until the device was full.
  for (const bool legacy : {true, false}) {
    INFO("consumer is the legacy stream: " << legacy);
    SimDriver sim(small_sim(std::size_t{1} << 30));
    PoolOptions options = options_on(sim);
    options.release_threshold = ~std::uint64_t{0};
    Pool pool(options);
    cudaStream_t a = sim.create_stream();
    cudaStream_t b = legacy ? nullptr : sim.create_stream();
    for (int round = 0; round < 20000; ++round) {
      void* p = pool.allocate(1 << 20, b);
      void* q = pool.allocate(4096, b);
      void* r = pool.allocate(2 << 20, a);
      pool.deallocate(p, b);
      void* s = pool.allocate(512 << 10, a);
      pool.deallocate(r, b);  // foreign: allocated on a
      void* t = pool.allocate(3 << 20, a);
      pool.deallocate(s, a);
      pool.deallocate(q, b);
      pool.deallocate(t, a);
      // Each round's work completes (the replay synchronizes its streams after
      // each pass); the pool is not told, it sees it through its fences.
      sim.stream_synchronize(a);
      sim.stream_synchronize(b);
    }
    const PoolStats stats = pool.stats();
    CHECK(stats.reserved_high <= (std::size_t{64} << 20));  // live at most 6.5 MiB
    CHECK(stats.device_synchronizes == 0);
    pool.check_invariants();
    sim.destroy_stream(a);
    if (b != nullptr) sim.destroy_stream(b);
  }
}
