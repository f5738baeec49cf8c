// PoolSleep: a pool's sleep and wake — its physical memory given back to the
// device and made anew under the same addresses, the live blocks' contents
// copied to pinned host memory and back on the pool's own copy stream
// (docs/sleep-wake.md).
//
// Sleep (Pool::sleep):
//   1. an event on the caller's stream; the copy stream waits for it (backup)
//      or the host does (discard): only the work the caller ordered first;
//   2. backup: each live range copied device to host into pinned slabs that
//      stay across cycles (they grow only when a sleep needs more than any
//      before, or through reserve_host_memory), one copy per range, all in
//      flight on the copy stream; slabs still to pin are pinned on several
//      threads, each one's copies enqueued as soon as it is pinned
//      (sleep_slab_pinner.hpp: pinning runs far below the link); then a
//      host wait on the copy stream's own event (never a device synchronize);
//   3. the pool is asleep; every chunk (its ghosts too) unmapped and released.
// Wake (Pool::wake):
//   1. every chunk created anew where it lay, then mapped, then given the
//      owner's and the peers' access (Arena::reback): all or nothing;
//   2. the bytes of the blocks still live, and only those, copied host to
//      device on the copy stream, and the caller's stream made to wait for
//      them: wake returns at once. The copies run after wake returns, while
//      the pool may hand out or release its free memory (another stream's
//      allocation, trim, the release worker, a growth): so no copy touches a
//      byte that is not a live block's. Adjacent live blocks are restored by
//      one copy; a gap between them, or a block freed while asleep, splits it.
//      After SleepMode::discard_zeroed the same blocks are zeroed instead, by
//      memsets on the copy stream under the same rules (the caller's stream
//      waits for them; frees meanwhile are ordered after them): only the
//      live blocks, never the whole remade memory, because free memory may
//      be handed out and written on another stream before the memsets run.
//
// Failures: a failure before step 3 of sleep leaves the pool awake as it was
// (and its host memory too: the slabs that sleep pinned are freed);
// one in step 3 leaves it asleep with the chunks not yet released still
// mapped (a later sleep releases them, wake makes only what went). A failed
// wake leaves it asleep with nothing made. Nothing is leaked either way.
//
// Threads: the pool calls sleep, wake, release_host_memory and
// reserve_host_memory under its heap lock, one at a time; asleep() and the
// counts may be read from any thread. The slabs may also grow on the pool's
// pin-ahead thread (pin_ahead_once, sleep_pin_ahead.hpp), which never takes
// the heap lock: host_mu_ guards the slabs, and each call above takes it for
// its whole length (lock order: heap lock, then host_mu_) once the pin in
// flight, if any, has settled (its slab then adopted and used by the call).
#pragma once

#include "arena/arena.hpp"
#include "core/sleep_host_slab.hpp"

#include <sova/driver.hpp>
#include <sova/sleep.hpp>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

namespace sova::detail {

/// Pinned host memory is taken in slabs of at most this size: a 32 GiB
/// backup pins 32 slabs once, and a small pool pins no more than it needs.
inline constexpr std::size_t kSleepSlabBytes = std::size_t{1} << 30;
/// Slabs pinned together are cut at least this small (a smaller need takes
/// one slab of its size): a 1 GiB backup pins 16 slabs of 64 MiB, so that
/// the pinning threads share it and copies start after the first 64 MiB.
inline constexpr std::size_t kSleepMinSlabBytes = std::size_t{64} << 20;
/// Pin-ahead pins one slab of at most this size at a time: the longest a
/// sleep, wake or release waits for a pin in flight (~60 ms at the 2 GiB/s
/// measured on an H200 host), and a slab size at which pinning's cost per
/// call is small.
inline constexpr std::size_t kPinAheadSlabBytes = std::size_t{128} << 20;
/// Every slab's size is a multiple of this.
inline constexpr std::size_t kSlabRounding = std::size_t{2} << 20;
/// The most host memory a pool pins for backups in all (64 TiB: more than
/// any host has). A reservation of this or more is refused
/// (cudaErrorMemoryAllocation, nothing pinned) after the budget's check, so
/// that a pool with a budget counts it as the budget's refusal; the sizes
/// pinning computes are capped here, so that no rounding overflows.
inline constexpr std::size_t kMaxSleepHostBytes = std::size_t{1} << 46;

class PoolSleep {
 public:
  /// A live block to back up: its pool offset, the bytes to keep (what the
  /// user asked for), and how many bytes from `offset` on are its own and
  /// backed (>= bytes: the block's rounding), which a restore may write too.
  struct Range {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    std::size_t owned = 0;
  };

  /// No driver call: the copy stream, events and host memory come with the
  /// first sleep. `slab_bytes`: the most host memory pinned in one piece
  /// (tests cover a sleep over many slabs with small ones). `host_budget`:
  /// the most host memory held for backups (PoolOptions::sleep_host_budget;
  /// 0: no limit).
  PoolSleep(Driver& driver, int device, Arena& arena, std::size_t slab_bytes = kSleepSlabBytes,
            std::size_t host_budget = 0) noexcept
      : driver_(driver), device_(device), arena_(arena), slab_bytes_(slab_bytes), host_budget_(host_budget) {}
  /// Waits for its own copies, then frees its host memory, stream and events.
  ~PoolSleep();
  PoolSleep(const PoolSleep&) = delete;
  PoolSleep& operator=(const PoolSleep&) = delete;

  /// From the start of a sleep until a wake completes (or the sleep fails
  /// with the pool awake): the pool refuses allocations meanwhile.
  bool asleep() const noexcept { return asleep_.load(std::memory_order_acquire); }
  /// Physical bytes sleep released that wake has not made again.
  std::size_t asleep_bytes() const noexcept { return asleep_bytes_.load(std::memory_order_relaxed); }
  /// Pinned host memory held for backups (kept across cycles).
  std::size_t host_bytes() const noexcept { return host_bytes_.load(std::memory_order_relaxed); }
  /// The most host memory held for backups (0: no limit).
  std::size_t host_budget() const noexcept { return host_budget_; }
  /// The part of host_bytes() that pin_ahead_once pinned.
  std::size_t pinned_ahead_bytes() const noexcept { return pinned_ahead_bytes_.load(std::memory_order_relaxed); }
  /// Sleeps and reservations refused because they would exceed the budget.
  std::uint64_t budget_refusals() const noexcept { return budget_refusals_.load(std::memory_order_relaxed); }

  /// Puts the pool to sleep after the work ordered before on `stream`.
  /// `gather_live` (backup and discard_zeroed) appends the live blocks
  /// (Range) in address order; it is called once allocations are refused,
  /// and may throw std::bad_alloc.
  /// Asleep already: releases what an earlier failed sleep left mapped, if
  /// anything (whatever `mode`: the first sleep's mode holds).
  /// cudaErrorNotSupported, the pool awake as it was, for backup on a driver
  /// without host copies and for discard_zeroed on one without memsets.
  cudaError_t sleep(SleepMode mode, cudaStream_t stream,
                    const std::function<void(std::vector<Range>&)>& gather_live) noexcept;
  /// Makes the memory anew and restores (discard_zeroed: zeroes) the blocks
  /// saved at sleep for which `still_live(block offset)` holds, ordered
  /// before later work on `stream`; a block freed while asleep is free
  /// memory from here on, its backup dropped, and no byte outside the live
  /// blocks is written. A failed wake leaves the pool asleep, the plan kept:
  /// a retry restores (or zeroes) the same way.
  /// Awake already: cudaSuccess, nothing done.
  cudaError_t wake(cudaStream_t stream, const std::function<bool(std::size_t offset)>& still_live) noexcept;
  /// Whether a free must be ordered after a wake's restore (or zeroing): a
  /// wake is choosing the blocks to restore and enqueuing their copies, or
  /// its copies may still be writing them. One load, sequentially consistent:
  /// the pool's free reads it after its block left the live state, and wake
  /// publishes it before it reads which blocks are live, so that a free
  /// racing with a wake either is seen by the wake (its block is not
  /// restored) or sees the wake (PoolCore::free_stamped).
  bool restore_pending() const noexcept { return restore_phase_.load(std::memory_order_seq_cst) != kNoRestore; }
  /// A free on `stream` while a restore may run: later work on `stream`
  /// (and so the free's fence) waits for the restore's copies, so that the
  /// block's memory is never reused or released under them — a block live at
  /// wake, freed during the wake or at once after it on another stream than
  /// wake's (docs/sleep-wake.md). While the wake still enqueues, the caller
  /// waits on the host for it to finish enqueuing (no device wait).
  void order_after_restore(cudaStream_t stream) noexcept;
  /// The host waits for a pending restore (a graph's blocks going back as
  /// complete for every stream, with no stream to order).
  void wait_for_restore() noexcept;
  /// Where the last backup holds the pool's bytes at `offset`: their host
  /// address, and how many of the next `bytes` lie there in one piece (one
  /// copy of the backup: a block may be split between slabs); {nullptr, 0}
  /// where it holds none (no backup yet, a sleep that discarded, a byte of no
  /// block live at that sleep, or the host memory given back since). Kept
  /// across wake until the next sleep or release_host_memory: after wake it
  /// is what the sleep copied, not what the device holds now. Heap lock held.
  std::pair<const void*, std::size_t> backup_at(std::size_t offset, std::size_t bytes) noexcept;
  /// Frees the pinned host memory kept for backups (awake only; asleep:
  /// cudaErrorNotPermitted, the backups are in it).
  cudaError_t release_host_memory() noexcept;
  /// Pins host memory ahead, until at least `bytes` are held for backups, so
  /// that a sleep backing up no more than that pins nothing. All or nothing:
  /// on failure the memory held is as before; beyond the budget:
  /// cudaErrorMemoryAllocation, nothing pinned. Asleep or awake.
  cudaError_t reserve_host_memory(std::size_t bytes) noexcept;

  /// What pin_ahead_once did.
  enum class PinAhead {
    idle,    ///< nothing to pin: `target` held, asleep, or at the budget
    pinned,  ///< one slab pinned and adopted
    failed,  ///< the host refused it (out of pinned memory): nothing changed
  };
  /// Pin-ahead's step, on its own thread, never under the heap lock: pins
  /// one slab of at most kPinAheadSlabBytes towards `target` bytes held, within
  /// the budget, unless asleep. host_mu_ is not held while the driver pins;
  /// meanwhile sleep, wake and the release wait for the slab and use it.
  /// `releases_seen`: releases() read before `target` was decided; where a
  /// release came since, nothing is pinned (that target predates it).
  PinAhead pin_ahead_once(std::size_t target, std::uint64_t releases_seen) noexcept;
  /// The step that refused in the last pin_more that pinned any (a sleep's
  /// or reserve_host_memory's; PinStep::none when it succeeded, or failed
  /// for another reason): which limit the host hit. Any thread.
  PinStep pin_refusal() const noexcept { return pin_refusal_.load(std::memory_order_relaxed); }
  /// How many release_host_memory calls gave the slabs back so far.
  std::uint64_t releases() const noexcept { return releases_.load(std::memory_order_acquire); }

 private:
  /// One backup copy: pool offset, bytes, and where in which slab. In
  /// address order; together they hold the coalesced ranges.
  struct Copy {
    std::size_t offset = 0;
    std::size_t bytes = 0;
    std::size_t slab = 0;
    std::size_t slab_offset = 0;
  };
  /// A block backed up, and which coalesced range holds it: blocks of one
  /// range that touch may be restored by one copy.
  struct Saved {
    Range block;
    std::size_t range = 0;
  };
  /// host_mu_, once no pin is in flight (a slab pin_ahead_once is pinning
  /// is adopted first). Taken by every call made under the heap lock.
  std::unique_lock<std::mutex> settle_pin_ahead() noexcept;
  /// Whether pinning `more` bytes (bytes_to_pin) keeps the host memory held
  /// within the budget; counts a refusal when not. host_mu_ held.
  bool within_budget(std::size_t more) noexcept;
  /// The host memory that holding `bytes` in all needs pinned beyond what is
  /// held: rounded up to kSlabRounding, capped at kMaxSleepHostBytes (any
  /// size, SIZE_MAX included, without overflow or throwing); what the slabs
  /// slab_sizes_to_pin lays out add up to, below the cap. host_mu_ held.
  std::size_t bytes_to_pin(std::size_t bytes) const noexcept;
  /// The copy stream and the two events, made once.
  cudaError_t ensure_stream() noexcept;
  /// Steps 1 and 2 of sleep: on failure the memory is as it was.
  /// Sets zero_on_wake_ for `mode`.
  cudaError_t back_up(SleepMode mode, cudaStream_t stream,
                      const std::function<void(std::vector<Range>&)>& gather_live) noexcept;
  /// Lays `live` out over the slabs held and, after them, the slabs of
  /// `new_slabs` (set: the sizes still to pin). May throw std::bad_alloc.
  void plan_copies(const std::vector<Range>& live, std::vector<std::size_t>& new_slabs);
  /// Appends the sizes of the slabs to pin for `bytes` of host memory held
  /// in all. May throw std::bad_alloc.
  void slab_sizes_to_pin(std::size_t bytes, std::vector<std::size_t>& sizes) const;
  /// Pins a slab of each of `sizes` and appends them to slabs_, calling
  /// `on_pinned(slab index)` as each comes ready. On failure: the copies
  /// waited for, what was pinned freed, slabs_ as before.
  cudaError_t pin_more(const std::vector<std::size_t>& sizes,
                       const std::function<cudaError_t(std::size_t slab)>& on_pinned) noexcept;
  /// Enqueues the backup's copies into slab `slab` on the copy stream.
  cudaError_t enqueue_backup(std::size_t slab) noexcept;
  /// The pool ranges to restore: the saved blocks still live, those of one
  /// coalesced range merged where one's own bytes reach the next. In address
  /// order. Throws std::bad_alloc.
  std::vector<Range> live_extents(const std::function<bool(std::size_t)>& still_live) const;
  /// Enqueues the copies host to device of [offset, offset + bytes), which
  /// the backup holds, from wherever in the slabs it lies.
  cudaError_t enqueue_restore(const Range& extent) noexcept;
  /// discard_zeroed: saves the live blocks' places (no copy), each joinable
  /// to the next where its own bytes reach it (live_extents). May throw
  /// std::bad_alloc.
  void plan_zeroing(const std::vector<Range>& live);
  /// Enqueues a memset to zero of [offset, offset + bytes) on the copy stream.
  cudaError_t enqueue_zero(const Range& extent) noexcept;
  /// Waits for the copies enqueued so far (the copy stream's own work).
  cudaError_t drain_copies() noexcept;
  /// Releases every chunk still mapped; the pool is asleep from here on.
  cudaError_t release_chunks() noexcept;
  void* device_address(std::size_t offset) const noexcept { return reinterpret_cast<void*>(arena_.base() + offset); }
  void* host_address(const Copy& c) const noexcept { return static_cast<char*>(slabs_[c.slab].ptr) + c.slab_offset; }

  Driver& driver_;
  const int device_;
  Arena& arena_;
  const std::size_t slab_bytes_;
  const std::size_t host_budget_;
  /// Guards slabs_ (and host_bytes_'s writes) and pin_in_flight_, against the
  /// pin-ahead thread. After the heap lock, never before it.
  std::mutex host_mu_;
  std::condition_variable pin_settled_;  ///< pin_in_flight_ went false
  bool pin_in_flight_ = false;           ///< pin_ahead_once is pinning a slab (pin_host_slab)
  /// Callers waiting in settle_pin_ahead: while any waits, pin_ahead_once
  /// starts no slab, so that a wait is one slab's pinning at most (the
  /// pinning thread would otherwise take host_mu_ back first, slab after slab).
  std::size_t settling_ = 0;
  std::atomic<std::uint64_t> releases_{0};  ///< written under host_mu_ (release_host_memory)
  cudaStream_t copy_stream_ = nullptr;
  EventHandle caller_event_ = nullptr;  ///< recorded on the caller's stream
  EventHandle copy_event_ = nullptr;    ///< recorded on the copy stream
  std::vector<PinnedSlab> slabs_;
  /// The last backup's copies: the current sleep's, kept after its wake for
  /// backup_at until the next sleep or release_host_memory. Heap lock.
  std::vector<Copy> copies_;
  std::vector<Saved> saved_;  ///< the blocks of the current sleep's backup (or zeroing)
  /// The current sleep is discard_zeroed: wake zeroes saved_'s live blocks
  /// instead of restoring them. Heap lock.
  bool zero_on_wake_ = false;
  /// The copies of this sleep are complete and the chunks are going (or
  /// gone): a later sleep only finishes the release. Heap lock.
  bool slept_ = false;
  std::vector<Arena::Extent> released_;  ///< where the released chunks lay
  std::atomic<bool> asleep_{false};
  /// Where the restore stands, for frees (restore_pending):
  ///   kNoRestore  nothing of a wake can write a block;
  ///   kWaking     a wake is choosing the live blocks and enqueuing their
  ///               copies (copy_event_ not yet recorded for them);
  ///   kRestoring  a wake's copies may still run (copy_event_ marks their
  ///               end); back to kNoRestore once seen done
  ///               (order_after_restore, wait_for_restore).
  static constexpr std::uint8_t kNoRestore = 0, kWaking = 1, kRestoring = 2;
  std::atomic<std::uint8_t> restore_phase_{kNoRestore};
  /// Waits on the host until no wake is enqueuing; returns the phase then.
  std::uint8_t wait_while_waking() const noexcept;
  std::atomic<std::size_t> asleep_bytes_{0};
  std::atomic<std::size_t> host_bytes_{0};
  std::atomic<std::size_t> pinned_ahead_bytes_{0};
  std::atomic<std::uint64_t> budget_refusals_{0};
  std::atomic<PinStep> pin_refusal_{PinStep::none};
};

}  // namespace sova::detail
