// StreamState: what a pool knows of one stream.
//
// Its fields are StreamCaches' (stream_caches.hpp), and of its
// StreamRegistry's, StreamCaches' part that makes, finds and fences states:
// they are private, and those two are the only friends (with
// StreamStateTestAccess, the tests' door, which the library never defines).
// The rest of the pool reads two identity fields, set before the state is
// published and never changed after, through const accessors (is_legacy,
// stream_id); to it a state is otherwise a key (the heap's pending ranges,
// a block's stream, a ghost's pin) handed back to StreamCaches' operations.
//
// Epochs and fences (how frees become safe for other streams without an
// event per free): every free on a stream is stamped with the stream's
// current epoch. Closing an epoch records one event (a fence) on the stream;
// once the fence completes, every free stamped with that epoch or earlier is
// complete. Fences are recorded lazily: when another stream asks for this
// stream's memory (at this stream's next pool call, which is the only moment
// the handle is known to be alive), on a large free at most once per
// kFenceInterval, or by the pool itself on the legacy default stream, which
// can never be destroyed.
#pragma once

#include "core/block.hpp"
#include "core/size_bins.hpp"
#include "core/spin_lock.hpp"

#include <sova/driver.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <set>

namespace sova::detail {

struct Fence {
  EventHandle event = nullptr;
  std::uint64_t epoch = 0;  ///< frees stamped <= epoch are complete once the event is
};

struct StreamState {
  // ---- identity: fixed before the state is published; the pool reads it ----

  /// Whether this is the legacy default stream's state (0 / cudaStreamLegacy,
  /// either device's). PoolCore::allocate and deallocate read it to skip the
  /// capture and reuse questions the legacy stream never needs.
  bool is_legacy() const noexcept { return is_legacy_; }
  /// The driver's never-reused id of the stream this state was made for
  /// (cuStreamGetId); 0 when unknown or not checked. PoolCore::allocate
  /// compares it with the handle's id now, to tell a reused handle
  /// (StreamCaches::renew).
  unsigned long long stream_id() const noexcept { return stream_id_; }

 private:
  // Every field and member below is StreamCaches' and its StreamRegistry's
  // (stream_caches.hpp); StreamStateTestAccess is the tests' narrow door
  // (test/core/stream_state_access.hpp), defined nowhere in the library.
  friend class StreamCaches;
  friend class StreamRegistry;
  friend struct StreamStateTestAccess;

  /// Canonical key: the handle, kLegacyKey for 0 / cudaStreamLegacy, or a
  /// per-thread key for cudaStreamPerThread.
  std::uintptr_t key = 0;
  bool is_legacy_ = false;            ///< is_legacy()
  unsigned long long stream_id_ = 0;  ///< stream_id()
  /// The device of the stream this state was made for, as found when the
  /// state was made or renewed (the only moments the handle is known to name
  /// it): for the implicit handles the current device, for others the
  /// driver's answer outside capture; -1 where not known (the state was made
  /// under capture or without stream checks). Frees never ask the driver
  /// (StreamRegistry::learn_device says why that stays correct).
  std::atomic<int> device{-1};
  /// Set once this state's stream is found on another device than the
  /// pool's (when the state is made or renewed, or when a fence cannot be
  /// recorded on it), and never cleared: the pool's fence events cannot be
  /// recorded on such a stream, and for the implicit handles a fence recorded
  /// from another thread would land on another device's stream and prove
  /// nothing. Such a state records no fence; its frees complete through
  /// synchronizes, which cover every device (StreamRegistry::synchronize_devices).
  std::atomic<bool> foreign{false};

  // ---- guarded by `lock` --------------------------------------------------
  SpinLock lock;
  /// The block this stream's last free cached (compared, never dereferenced,
  /// by the fast path: kLargestCachedBlock). Guarded by `lock`.
  const Block* last_freed = nullptr;
  SizeBins cache;
  std::uint64_t epoch = 1;       ///< stamped on frees now
  std::uint64_t safe_epoch = 0;  ///< frees stamped <= this are known complete
  std::deque<Fence> fences;      ///< recorded, not yet seen complete; oldest first
  std::int64_t last_fence_ns = 0;
  std::uint32_t large_frees = 0;      ///< counts frees of a granule or more (see kClockEvery)
  std::uint32_t misses = 0;           ///< counts slow-path allocations (see kMissClockEvery, stream_caches.cpp)
  std::uint32_t foreign_frees = 0;    ///< counts frees of blocks allocated on another stream
  bool open_epoch_has_frees = false;  ///< a free is stamped with `epoch` (a fence would cover it)
  /// The newest epoch closed without a fence (StreamRegistry::close_epoch_locked,
  /// for a synchronize or a stream wait); its frees wait for that synchronize,
  /// and where it failed, for a later one: no fence covers them.
  std::uint64_t closed_unfenced = 0;

  // ---- written under `lock`, read by statistics without it ------------------
  std::atomic<std::int64_t> live_bytes{0};  ///< requested bytes allocated minus freed on this stream
  std::atomic<std::int64_t> live_blocks{0};
  std::atomic<std::int64_t> live_high{0};  ///< high-water mark of live_bytes
  std::atomic<std::uint64_t> allocations{0};
  std::atomic<std::uint64_t> deallocations{0};
  std::atomic<std::uint64_t> fast_hits{0};

  /// The pool's previous state in its list of every state ever made
  /// (StreamRegistry::for_each_state): written once, before the state is published.
  StreamState* older = nullptr;

  /// Set by another stream that wants this stream's cached memory; the next
  /// call on this stream records a fence.
  std::atomic<bool> fence_requested{false};

  /// Set when the stream's handle was reused by a new stream: no fence can
  /// ever be recorded on it again.
  std::atomic<bool> retired{false};
  /// A retired state with no fence outstanding: its blocks can only come back
  /// through a device synchronize, so the slow path stops looking at it
  /// (every miss would otherwise lock and scan it, for nothing).
  std::atomic<bool> frozen{false};
  /// Whether the stream allocated or freed in the last kActivityWindowNs, as
  /// the release worker last saw (StreamCaches::track_activity); a new
  /// state starts active. Retired states are never active.
  std::atomic<bool> active{true};
  // ---- the release worker's own -------------------------------------------
  std::uint64_t activity_seen = 0;  ///< allocations + deallocations at its last look
  std::int64_t last_active_ns = 0;  ///< when it last saw them change

  /// Counts an allocation of `bytes` on this stream (lock held): used bytes and
  /// blocks, the stream's high-water mark, and the allocation itself.
  void count_allocation(std::size_t bytes) noexcept {
    bump(live_bytes, static_cast<std::int64_t>(bytes));
    bump(live_blocks, 1);
    bump(allocations);
    const std::int64_t live = live_bytes.load(std::memory_order_relaxed);
    if (live > live_high.load(std::memory_order_relaxed)) live_high.store(live, std::memory_order_relaxed);
  }

  /// Whether what this state caches is stranded (StreamRegistry::stranded):
  /// its stream is gone or quiet, so no fence of its own will come. Not the
  /// legacy stream's: the pool records its fences itself (StreamCaches::harvest).
  bool strands_cache() const noexcept {
    return !is_legacy_ && (retired.load(std::memory_order_relaxed) || !active.load(std::memory_order_relaxed));
  }

  /// Adds `delta` to a counter that only this stream's lock holder writes.
  static void bump(std::atomic<std::int64_t>& counter, std::int64_t delta) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
  }
  static void bump(std::atomic<std::uint64_t>& counter) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

/// cudaStreamLegacy's value, used as the key for 0 and cudaStreamLegacy alike.
inline constexpr std::uintptr_t kLegacyKey = 0x1;

}  // namespace sova::detail
