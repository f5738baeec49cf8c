// HeapMutex: the pool's heap lock — a std::mutex that spins briefly before
// it sleeps.
//
// The slow path holds the heap lock for a few hundred nanoseconds on most
// misses, and for tens of microseconds to milliseconds when it calls the
// driver (creating or moving chunks, synchronizing). A plain std::mutex puts
// a waiter to sleep at once, and the futex wake-up that hands the lock over
// costs microseconds: with 16 threads missing on mixed sizes, each miss cost
// ~8 us of handover for ~0.5 us of work (threads_mixed, classes:64, on the
// H100; docs/notes/2026-11-23-real-workload-speed.md). Spinning first lets
// a short hold pass the lock without a sleep; a long one still sleeps.
// BasicLockable and Lockable: std::lock_guard and std::unique_lock take it.
#pragma once

#include "core/spin_lock.hpp"  // SOVA_CPU_RELAX

#include <mutex>

namespace sova::detail {

class HeapMutex {
 public:
  void lock() {
    for (int spin = 0; spin < kSpins; ++spin) {
      if (mutex_.try_lock()) return;
      SOVA_CPU_RELAX();
    }
    mutex_.lock();
  }
  bool try_lock() { return mutex_.try_lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  /// About 2-10 us of pauses (a pause is 40-140 cycles, by processor):
  /// longer than a short hold, far shorter than a driver call.
  static constexpr int kSpins = 128;
  std::mutex mutex_;
};

}  // namespace sova::detail
