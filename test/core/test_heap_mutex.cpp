// HeapMutex (lib/core/heap_mutex.hpp): the heap lock's mutual exclusion, and
// that waiters which gave up spinning and slept are woken by unlock.
#include "support/catch.hpp"

#include "core/heap_mutex.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

using sova::detail::HeapMutex;

TEST_CASE("heap mutex: threads that contend never hold it at once, and none is lost", "[core][heap_mutex]") {
  HeapMutex mutex;
  constexpr int kThreads = 8;
  constexpr int kRounds = 20000;
  long long counter = 0;  // plain: a second holder would lose increments (and TSan would say so)
  std::atomic<int> holders{0};
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::lock_guard<HeapMutex> lock(mutex);
        if (holders.fetch_add(1) != 0) overlaps.fetch_add(1);
        counter += 1;
        // Some holds long enough that waiters run out of spins and sleep.
        if ((i + t) % 997 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
        holders.fetch_sub(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(overlaps.load() == 0);
  CHECK(counter == static_cast<long long>(kThreads) * kRounds);
}

TEST_CASE("heap mutex: sleeping waiters are woken, one per unlock", "[core][heap_mutex]") {
  HeapMutex mutex;
  mutex.lock();
  constexpr int kWaiters = 4;
  std::atomic<int> acquired{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      std::lock_guard<HeapMutex> lock(mutex);
      acquired.fetch_add(1);
    });
  }
  // Far longer than the spin (~10 us): every waiter is asleep by now.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(acquired.load() == 0);
  CHECK_FALSE(mutex.try_lock());
  mutex.unlock();
  for (std::thread& t : waiters) t.join();  // hangs if an unlock failed to wake a sleeper
  CHECK(acquired.load() == kWaiters);
  CHECK(mutex.try_lock());
  mutex.unlock();
}
