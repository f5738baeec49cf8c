// SleepPinAhead: a pool's background thread that pins sleep's backup slabs
// ahead of the first sleep (PoolOptions::sleep_pin_ahead; docs/sleep-wake.md,
// "Pinning ahead").
//
// Why: pinning host memory runs below the link even pinned in place
// (sleep_host_slab.hpp: 14.5-19.2 GiB/s in a probe on an H200 host,
// against copies at ~51 GiB/s there; cudaHostAlloc, used before, 2-3 GiB/s).
// A first sleep that pins its backup runs at the pinning rate. Pinned while
// the pool grows (loading weights, warming up), the slabs are there when the
// first sleep comes. Each slab is pinned by pin_host_slab, its pages touched
// by kPinAheadTouchThreads threads, started and joined by that pin: between
// pins only this thread runs.
//
// What: the target is min(the budget, the most a successful growth left the
// pool reserving): a backup never needs more than the pool reserves (live
// blocks and the small gaps between them). A growth that failed midway and
// was undone is not counted, though reservedHigh counts its chunks: no block
// ever lived in them, so no backup needs them. The thread pins one slab at a
// time (PoolSleep::pin_ahead_once) until the target is held, then waits for
// the pool to grow. It pins nothing while the pool is asleep. Held (pins
// nothing) after release_sleep_host_memory until a growth leaves the pool
// backing more than it ever had (Arena::backed_peak: undone growths
// included, never reset, so that neither a failed growth's undoing nor a
// reset of reservedHigh brings released memory back behind the caller's
// back); held after a pin the host refused (counted: not an error for the
// user) until the pool grows past the target it had. reserve_sleep_backup
// lifts either hold.
//
// Threads: note_reserved, hold and resume are called under the pool's heap
// lock; the thread never takes the heap lock (PoolSleep's host_mu_ guards
// the slabs against sleep, wake and the release). stop() (the pool's
// destruction) joins the thread, waiting for a pin in flight at most.
#pragma once

#include "core/pool_sleep.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace sova::detail {

/// How often the thread looks again without being told of growth: a wake
/// after a sleep, or growth it was not told of, is seen within this.
inline constexpr std::chrono::milliseconds kPinAheadPoll{50};

class SleepPinAhead {
 public:
  /// `enabled` (PoolOptions::sleep_pin_ahead): starts the thread; without,
  /// every call is one load and the target is 0. A thread that cannot be
  /// started counts a failure and pins nothing.
  SleepPinAhead(PoolSleep& sleep, bool enabled) noexcept;
  ~SleepPinAhead() { stop(); }
  SleepPinAhead(const SleepPinAhead&) = delete;
  SleepPinAhead& operator=(const SleepPinAhead&) = delete;

  /// The pool reserves `reserved` bytes now (after a growth; heap lock
  /// held). More than it has seen: the thread is woken, and a hold whose
  /// mark this passes is lifted.
  void note_reserved(std::size_t reserved) noexcept;
  /// Pin nothing until a growth leaves the pool reserving more than
  /// `backed_peak` (Arena::backed_peak: the most it ever backed) and more
  /// than any growth so far (release_sleep_host_memory, before it releases;
  /// heap lock held). Returns whether a hold was on already (for undo_hold).
  bool hold(std::size_t backed_peak) noexcept;
  /// Lifts the hold hold() put on where `was_held` (its result) is false:
  /// the release it was for failed.
  void undo_hold(bool was_held) noexcept {
    if (!was_held) resume();
  }
  /// Lifts a hold (reserve_sleep_backup: the user asks for host memory).
  void resume() noexcept;
  /// Stops and joins the thread; idempotent. A pin in flight completes and
  /// its slab is the pool's (freed with PoolSleep).
  void stop() noexcept;

  /// What the thread works towards now: min(the budget rounded down to
  /// whole slabs, the most a successful growth reserved); 0 when off or held.
  std::size_t target() const noexcept;
  /// Pins the host refused, ever.
  std::uint64_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  void run() noexcept;
  std::size_t target_locked() const noexcept;

  PoolSleep& sleep_;
  const bool enabled_;
  mutable std::mutex mu_;  ///< the fields below but the atomics; never held while pinning
  std::condition_variable changed_;
  bool stop_ = false;
  bool held_ = false;
  std::size_t held_through_ = 0;                ///< held while the pool has reserved no more than this
  std::atomic<std::size_t> reserved_seen_{0};   ///< the most a successful growth reserved (written under mu_)
  std::atomic<std::uint64_t> failures_{0};
  std::thread thread_;
};

}  // namespace sova::detail
