// SleepPinAhead (sleep_pin_ahead.hpp): the thread's loop, and the target it
// works towards.
#include "core/sleep_pin_ahead.hpp"

#include "core/thread_name.hpp"

#include <algorithm>
#include <system_error>

namespace sova::detail {

SleepPinAhead::SleepPinAhead(PoolSleep& sleep, bool enabled) noexcept : sleep_(sleep), enabled_(enabled) {
  if (!enabled_) return;
  try {
    thread_ = std::thread([this] {
      name_this_thread("sova-pin-ahead");
      run();
    });
  } catch (const std::system_error&) {
    failures_.fetch_add(1, std::memory_order_relaxed);  // no thread: the first sleep pins, as without pin-ahead
  }
}

void SleepPinAhead::note_reserved(std::size_t reserved) noexcept {
  if (!enabled_ || reserved <= reserved_seen_.load(std::memory_order_relaxed)) return;
  {
    const std::lock_guard lock(mu_);
    if (reserved <= reserved_seen_.load(std::memory_order_relaxed)) return;
    reserved_seen_.store(reserved, std::memory_order_relaxed);
    if (held_ && reserved > held_through_) held_ = false;
  }
  changed_.notify_one();
}

bool SleepPinAhead::hold(std::size_t backed_peak) noexcept {
  if (!enabled_) return true;
  const std::lock_guard lock(mu_);
  const bool was_held = held_;
  held_ = true;
  held_through_ = std::max(backed_peak, reserved_seen_.load(std::memory_order_relaxed));
  return was_held;
}

void SleepPinAhead::resume() noexcept {
  if (!enabled_) return;
  {
    const std::lock_guard lock(mu_);
    held_ = false;
  }
  changed_.notify_one();
}

void SleepPinAhead::stop() noexcept {
  {
    const std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_one();
  if (thread_.joinable()) thread_.join();
}

std::size_t SleepPinAhead::target() const noexcept {
  const std::lock_guard lock(mu_);
  return target_locked();
}

std::size_t SleepPinAhead::target_locked() const noexcept {
  if (!enabled_ || held_) return 0;
  const std::size_t seen = reserved_seen_.load(std::memory_order_relaxed);
  // Slabs are whole multiples of kSlabRounding: a budget between two is
  // reached at the lower one (a target above it would never be reached).
  const std::size_t budget = sleep_.host_budget() / kSlabRounding * kSlabRounding;
  return sleep_.host_budget() == 0 ? seen : std::min(budget, seen);
}

void SleepPinAhead::run() noexcept {
  std::unique_lock lock(mu_);
  while (!stop_) {
    // Read before the target: a release (which holds first, under mu_, then
    // counts) after this read makes pin_ahead_once refuse this target; one
    // before it is seen here as the hold.
    const std::uint64_t releases = sleep_.releases();
    const std::size_t target = target_locked();
    PoolSleep::PinAhead step = PoolSleep::PinAhead::idle;
    if (target != 0) {
      lock.unlock();  // pinning takes seconds per GiB: growth, stats and stop() must not wait for it
      step = sleep_.pin_ahead_once(target, releases);
      lock.lock();
    }
    if (step == PoolSleep::PinAhead::failed) {
      // The host is out of pinned memory: retried only once the pool grows,
      // not in a loop against a full host. The first sleep pins the rest.
      failures_.fetch_add(1, std::memory_order_relaxed);
      held_ = true;
      held_through_ = reserved_seen_.load(std::memory_order_relaxed);
    }
    if (step != PoolSleep::PinAhead::pinned && !stop_) changed_.wait_for(lock, kPinAheadPoll);
  }
}

}  // namespace sova::detail
