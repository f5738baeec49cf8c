// A test-and-test-and-set spin lock for the per-stream caches.
//
// Why not std::mutex: the fast path's budget is tens of nanoseconds and the
// lock is almost never contended (one stream is usually driven by one
// thread); an uncontended exchange + store is about half the cost of a
// mutex lock/unlock pair. Contended waiters back off to yield().
#pragma once

#include <atomic>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SOVA_CPU_RELAX() _mm_pause()
#else
#define SOVA_CPU_RELAX() ((void)0)
#endif

namespace sova::detail {

class SpinLock {
 public:
  void lock() noexcept {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      int spins = 0;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          SOVA_CPU_RELAX();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace sova::detail
