// UsedHigh: the pool's exact used high-water mark (cudaMemPoolAttrUsedMemHigh:
// the peak of the sum of every stream's used bytes) while one host thread
// makes every allocation and free, at the cost of a thread-private compare
// and two stores per call.
//
// Why only then: an exact mark under concurrency needs one counter that every
// thread writes on every call, the cache line that makes the driver's pool
// fall from 0.6 M to 0.11 M pairs/s across 16 threads; sova's streams keep
// their counters apart instead (StreamState). While one thread calls — most
// programs, however many streams they use — that thread owns `total_` and
// `high_`, and nobody else writes them. The first call from a second thread
// freezes the mark reached so far (exact up to that call) and stops the
// counting for good; from then on the pool reports the larger of the frozen
// mark and the sampled one (StreamCaches::sample_used_high: a lower bound).
// docs/design.md, "Statistics", says what users get.
//
// Thread safety: note() from any thread (the fast path, a stream's lock
// held); reads and reset() from any thread. A reset racing with the owner's
// call leaves either value.
#pragma once

#include "base/tls_model.hpp"

#include <atomic>
#include <cstdint>

namespace sova::detail {

class UsedHigh {
 public:
  /// Counts `delta` used bytes (an allocation's request, a free's negative),
  /// on the calling thread.
  [[gnu::always_inline]] void note(std::int64_t delta) noexcept {
    const void* me = this_thread();
    const void* owner = owner_.load(std::memory_order_relaxed);
    if (owner != me) [[unlikely]] {
      if (!claim(owner, me)) return;
    }
    const std::int64_t total = total_.load(std::memory_order_relaxed) + delta;
    total_.store(total, std::memory_order_relaxed);
    if (total > high_.load(std::memory_order_relaxed)) high_.store(total, std::memory_order_relaxed);
  }

  /// Whether the mark is exact: no second thread has called note() yet.
  bool exact() const noexcept { return owner_.load(std::memory_order_acquire) != many(); }
  /// The exact mark, or once a second thread called, the mark reached before.
  std::uint64_t high() const noexcept {
    const std::int64_t h = exact() ? high_.load(std::memory_order_relaxed) : frozen_.load(std::memory_order_relaxed);
    return h > 0 ? static_cast<std::uint64_t>(h) : 0;
  }
  /// The mark down to what is used now (a reset of cudaMemPoolAttrUsedMemHigh).
  void reset() noexcept {
    high_.store(total_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    frozen_.store(0, std::memory_order_relaxed);
  }

 private:
  /// A token of the calling thread (the address of a thread-local).
  static const void* this_thread() noexcept {
    SOVA_TLS_INITIAL_EXEC static thread_local const char token = 0;
    return &token;
  }
  static const void* many() noexcept { return &kMany; }
  /// The first call makes its thread the owner; a call from another thread
  /// freezes the mark. True when the caller may count.
  [[gnu::noinline]] bool claim(const void* owner, const void* me) noexcept {
    if (owner == nullptr && owner_.compare_exchange_strong(owner, me, std::memory_order_acq_rel)) return true;
    if (owner != many()) {
      frozen_.store(high_.load(std::memory_order_relaxed), std::memory_order_relaxed);
      owner_.store(many(), std::memory_order_release);
    }
    return false;
  }

  static constexpr char kMany = 0;
  std::atomic<const void*> owner_{nullptr};  ///< the counting thread's token, nullptr before the first call, or many()
  std::atomic<std::int64_t> total_{0};       ///< used bytes; written by the owner alone
  std::atomic<std::int64_t> high_{0};        ///< the mark; written by the owner (and reset)
  std::atomic<std::int64_t> frozen_{0};      ///< the mark when a second thread first called
};

}  // namespace sova::detail
