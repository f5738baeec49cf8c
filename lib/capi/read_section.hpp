// sova C API — read sections: lets the fast path use pool objects without a
// lock or a shared counter, while sovaMemPoolDestroy can still free them safely.
//
// Contract (the pattern of RCU / quiescent-state reclamation):
//   * A ReadSection brackets every use of a PoolEntry reached through a
//     lock-free table (handle table, device pools, pointer registry).
//   * A writer first unpublishes an entry (no table leads to it any more),
//     then calls synchronize_readers(): when it returns, every section that
//     could have seen the entry has ended, and the entry may be deleted.
//   * Sections do not nest, and a thread inside one must not call
//     synchronize_readers() (it would wait for itself).
//   * A section may take the C API's lifetime mutex; a writer never holds that
//     mutex while it waits in synchronize_readers(), so this cannot deadlock.
//
// Cost (the reason for this design): entering and leaving a section are two
// stores to a line only this thread writes plus a compiler barrier, ~1-2 ns,
// and no shared cache line is written. The ordering the pattern needs (a
// reader's "I am inside" store before its loads of the tables) is provided
// asymmetrically: the writer issues membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED),
// which runs a full fence on every CPU running this process. Where the kernel
// refuses membarrier, readers fall back to a seq_cst fence (~10 ns).
#pragma once

#include "base/tls_model.hpp"

#include <atomic>
#include <cstdint>

namespace sova::capi {

/// One per thread that ever entered a section; never freed (reused after the
/// thread exits). Aligned so that no two threads' records share a cache line.
struct alignas(64) ReaderRecord {
  /// Odd while the owning thread is inside a section. Written only by the owner.
  std::atomic<std::uint64_t> seq{0};
  /// Owned by a live thread; a free record is taken over by the next new thread.
  std::atomic<bool> in_use{false};
  ReaderRecord* next = nullptr;  ///< immutable once pushed on the global list
};

namespace detail {
/// The calling thread's record; nullptr until its first section.
SOVA_TLS_INITIAL_EXEC extern constinit thread_local ReaderRecord* t_record;
/// True once membarrier is registered: readers then need only a compiler barrier.
extern std::atomic<bool> g_asymmetric;
/// Slow path: finds or makes the calling thread's record.
[[gnu::noinline]] ReaderRecord* register_reader() noexcept;
}  // namespace detail

/// Enables the asymmetric fence when the kernel allows it. Idempotent and
/// thread-safe; called before the first pool is created (slow path).
void enable_asymmetric_fence() noexcept;

/// Returns when every read section that was running at the call has ended.
/// Slow (a system call plus a scan of all thread records); writers only.
void synchronize_readers() noexcept;

class ReadSection {
 public:
  ReadSection() noexcept {
    ReaderRecord* r = detail::t_record;
    if (r == nullptr) [[unlikely]]
      r = detail::register_reader();
    record_ = r;
    const std::uint64_t s = r->seq.load(std::memory_order_relaxed);
    r->seq.store(s + 1, std::memory_order_relaxed);
    // The "inside" store must be ordered before this section's table loads.
    if (detail::g_asymmetric.load(std::memory_order_relaxed)) [[likely]]
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  ~ReadSection() { leave(); }
  ReadSection(const ReadSection&) = delete;
  ReadSection& operator=(const ReadSection&) = delete;

  /// Ends the section early (the destructor then does nothing).
  void leave() noexcept {
    if (record_ == nullptr) return;
    // Release: everything this section did happens-before the writer's
    // acquire load that sees the section ended.
    record_->seq.store(record_->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    record_ = nullptr;
  }

 private:
  ReaderRecord* record_;
};

}  // namespace sova::capi
