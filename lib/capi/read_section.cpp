// sova C API — read sections (see read_section.hpp for the contract).
#include "capi/read_section.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <new>
#include <thread>

namespace sova::capi {
namespace detail {

constinit thread_local ReaderRecord* t_record = nullptr;
std::atomic<bool> g_asymmetric{false};

namespace {

/// Head of the list of every record ever made (push only: never unlinked, so a
/// writer can walk it without a lock).
std::atomic<ReaderRecord*> g_records{nullptr};

/// Set while this thread's thread_local objects are being destroyed: a
/// section entered then gets a record that is never handed back (touching the
/// destroyed releaser again would be undefined).
constinit thread_local bool t_exiting = false;

/// Hands the thread's record back when the thread exits. Touched only when
/// the record is registered, so the fast path never pays its TLS wrapper.
struct RecordReleaser {
  ReaderRecord* record = nullptr;
  ~RecordReleaser() {
    t_exiting = true;
    t_record = nullptr;
    if (record != nullptr) record->in_use.store(false, std::memory_order_release);
  }
};
thread_local RecordReleaser t_releaser;

ReaderRecord* take_record() noexcept {
  // Reuse a record of a thread that has exited: its seq is even (the thread
  // left every section before it died), so writers see it as idle.
  for (ReaderRecord* r = g_records.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    bool expected = false;
    if (!r->in_use.load(std::memory_order_relaxed) &&
        r->in_use.compare_exchange_strong(expected, true, std::memory_order_acquire))
      return r;
  }
  // A record is 64 bytes; if even that cannot be had, the process is lost.
  auto* r = new (std::nothrow) ReaderRecord;
  if (r == nullptr) std::terminate();
  r->in_use.store(true, std::memory_order_relaxed);
  ReaderRecord* head = g_records.load(std::memory_order_relaxed);
  do {
    r->next = head;
  } while (!g_records.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
  return r;
}

}  // namespace

ReaderRecord* register_reader() noexcept {
  ReaderRecord* r = take_record();
  if (!t_exiting) t_releaser.record = r;  // else: leaked, stays "in use", idle
  t_record = r;
  return r;
}

}  // namespace detail

namespace {

bool membarrier_registered() noexcept {
  static const bool ok = [] {
#if defined(__NR_membarrier) && defined(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
    const long mask = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (mask < 0 || (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
    return false;
#endif
  }();
  return ok;
}

/// The writer's half of the asymmetric fence.
void heavy_fence() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if defined(__NR_membarrier) && defined(MEMBARRIER_CMD_PRIVATE_EXPEDITED)
  // Readers that saw g_asymmetric == true skipped their fence, and g_asymmetric
  // is only set after registration succeeded, so this is then always reached.
  if (membarrier_registered()) {
    if (syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
      // Registered but refused: cannot happen per the kernel's contract. Readers
      // without a fence would be unsafe, so stop here rather than corrupt memory.
      std::terminate();
    }
  }
#endif
}

}  // namespace

void enable_asymmetric_fence() noexcept {
  if (membarrier_registered()) detail::g_asymmetric.store(true, std::memory_order_release);
}

void synchronize_readers() noexcept {
  heavy_fence();
  for (ReaderRecord* r = detail::g_records.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    const std::uint64_t s = r->seq.load(std::memory_order_acquire);
    if ((s & 1) == 0) continue;
    // Inside a section that may have seen the old tables: wait for it to end.
    // A new section of that thread (seq moved on) sees the new tables.
    while (r->seq.load(std::memory_order_acquire) == s) std::this_thread::yield();
  }
}

}  // namespace sova::capi
