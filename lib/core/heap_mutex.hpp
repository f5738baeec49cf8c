// HeapMutex: the pool's heap lock — spins briefly, reading before it writes,
// then sleeps on a futex.
//
// The slow path holds the heap lock for a few hundred nanoseconds to a few
// microseconds on most misses, and for tens of microseconds to milliseconds
// when it calls the driver (creating or moving chunks, synchronizing). A
// plain std::mutex puts a waiter to sleep at once, and the futex wake-up
// that hands the lock over costs microseconds: with 16 threads missing on
// mixed sizes, each miss cost ~8 us of handover for ~0.5 us of work
// (threads_mixed, classes:64, on the H100). So waiters spin first.
//
// They spin on a plain load and try to take the lock only when it looks
// free (test-and-test-and-set): the previous version spun on
// std::mutex::try_lock, an atomic read-modify-write each time, so 15
// waiting threads kept the lock's cache line moving between cores while its
// holder worked and when it let go. After kSpins a waiter marks the lock
// contended and sleeps (std::atomic::wait, a futex on Linux); unlock wakes
// one sleeper only when one may be asleep (U. Drepper, "Futexes Are
// Tricky", mutex 2). BasicLockable and Lockable: std::lock_guard and
// std::unique_lock take it.
#pragma once

#include "core/spin_lock.hpp"  // SOVA_CPU_RELAX

#include <atomic>

namespace sova::detail {

class HeapMutex {
 public:
  void lock() noexcept {
    int expected = kFree;
    if (state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed)) {
      return;
    }
    lock_contended();
  }
  bool try_lock() noexcept {
    int expected = kFree;
    return state_.compare_exchange_strong(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed);
  }
  void unlock() noexcept {
    if (state_.exchange(kFree, std::memory_order_release) == kContended) state_.notify_one();
  }

 private:
  static constexpr int kFree = 0;
  static constexpr int kLocked = 1;     ///< held, nobody asleep
  static constexpr int kContended = 2;  ///< held, a waiter may be asleep
  /// About 2-10 us of pauses (a pause is 40-140 cycles, by processor):
  /// longer than a short hold, far shorter than a driver call.
  static constexpr int kSpins = 128;

  void lock_contended() noexcept {
    for (int spin = 0; spin < kSpins; ++spin) {
      if (state_.load(std::memory_order_relaxed) == kFree) {
        int expected = kFree;
        if (state_.compare_exchange_weak(expected, kLocked, std::memory_order_acquire, std::memory_order_relaxed)) {
          return;
        }
      }
      SOVA_CPU_RELAX();
    }
    // Taken with kContended, not kLocked: other sleepers may remain, and the
    // next unlock must wake one of them.
    while (state_.exchange(kContended, std::memory_order_acquire) != kFree) {
      state_.wait(kContended, std::memory_order_relaxed);
    }
  }

  std::atomic<int> state_{kFree};
};

}  // namespace sova::detail
