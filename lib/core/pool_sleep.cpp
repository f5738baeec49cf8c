// PoolSleep (pool_sleep.hpp): the order of sleep and wake, and what each
// failure leaves.
#include "core/pool_sleep.hpp"

#include "core/sleep_slab_pinner.hpp"

#include <algorithm>
#include <thread>
#include <new>

namespace sova::detail {

namespace {
/// Live ranges closer than this are copied as one, when the gap is backed:
/// fewer copies, at the price of a few free bytes.
constexpr std::size_t kCoalesceGap = std::size_t{1} << 20;
/// The most slabs a pool holds (slab_sizes_to_pin refuses more).
constexpr std::size_t kMaxSlabs = std::size_t{1} << 16;
std::size_t round_up_to_slab(std::size_t n) { return (n + kSlabRounding - 1) / kSlabRounding * kSlabRounding; }
}  // namespace

PoolSleep::~PoolSleep() {
  // The pin-ahead thread is stopped first (PoolCore); a slab it pinned is held.
  const std::unique_lock host = settle_pin_ahead();
  if (copy_stream_ != nullptr) {
    (void)driver_.stream_synchronize(copy_stream_);  // our copies only
    (void)driver_.stream_destroy(copy_stream_);
  }
  if (caller_event_ != nullptr) (void)driver_.event_destroy(caller_event_);
  if (copy_event_ != nullptr) (void)driver_.event_destroy(copy_event_);
  for (const PinnedSlab& s : slabs_) unpin_host_slab(driver_, s);
}

std::unique_lock<std::mutex> PoolSleep::settle_pin_ahead() noexcept {
  std::unique_lock lock(host_mu_);
  ++settling_;
  pin_settled_.wait(lock, [this] { return !pin_in_flight_; });
  --settling_;
  return lock;
}

bool PoolSleep::within_budget(std::size_t more) noexcept {
  const std::size_t held = host_bytes_.load(std::memory_order_relaxed);
  if (host_budget_ == 0 || more == 0 || (held <= host_budget_ && more <= host_budget_ - held)) return true;
  budget_refusals_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

PoolSleep::PinAhead PoolSleep::pin_ahead_once(std::size_t target, std::uint64_t releases_seen) noexcept {
  std::size_t bytes = 0;
  {
    const std::lock_guard lock(host_mu_);
    if (releases_.load(std::memory_order_relaxed) != releases_seen) return PinAhead::idle;
    const std::size_t held = host_bytes_.load(std::memory_order_relaxed);
    const std::size_t limit = host_budget_ == 0 ? target : std::min(target, host_budget_);
    if (asleep() || pin_in_flight_ || settling_ != 0 || held >= limit || slabs_.size() >= kMaxSlabs) {
      return PinAhead::idle;
    }
    bytes = std::min(round_up_to_slab(limit - held), std::min(slab_bytes_, kPinAheadSlabBytes));
    if (host_budget_ != 0) bytes = std::min(bytes, (host_budget_ - held) / kSlabRounding * kSlabRounding);
    if (bytes == 0) return PinAhead::idle;  // less than a slab's rounding left in the budget
    try {
      slabs_.reserve(slabs_.size() + 1);  // the adoption below cannot throw: no other call changes slabs_ meanwhile
    } catch (const std::bad_alloc&) {
      return PinAhead::failed;
    }
    pin_in_flight_ = true;
  }
  PinnedSlab slab;
  // Alone on this thread: its pages touched by a few (sleep_host_slab.hpp); no lock held.
  const cudaError_t error = pin_host_slab(driver_, device_, bytes, kPinAheadTouchThreads, &slab);
  {
    const std::lock_guard lock(host_mu_);
    pin_in_flight_ = false;
    if (error == cudaSuccess) {
      slabs_.push_back(slab);
      host_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      pinned_ahead_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    }
  }
  pin_settled_.notify_all();
  return error == cudaSuccess ? PinAhead::pinned : PinAhead::failed;
}

cudaError_t PoolSleep::ensure_stream() noexcept {
  if (caller_event_ == nullptr) {
    if (const cudaError_t e = driver_.event_create_on(device_, &caller_event_); e != cudaSuccess) {
      caller_event_ = nullptr;
      return e;
    }
  }
  if (copy_event_ == nullptr) {
    if (const cudaError_t e = driver_.event_create_on(device_, &copy_event_); e != cudaSuccess) {
      copy_event_ = nullptr;
      return e;
    }
  }
  if (copy_stream_ == nullptr) {
    if (const cudaError_t e = driver_.stream_create(device_, &copy_stream_); e != cudaSuccess) {
      copy_stream_ = nullptr;
      return e;
    }
  }
  return cudaSuccess;
}

void PoolSleep::plan_copies(const std::vector<Range>& live, std::vector<std::size_t>& new_slabs) {
  // Coalesce first, then lay the ranges out over the slabs in order (those
  // held, then those to pin), a range split where a slab ends.
  std::vector<Range> ranges;
  ranges.reserve(live.size());
  saved_.clear();
  saved_.reserve(live.size());
  for (const Range& r : live) {
    if (r.bytes == 0) continue;
    if (!ranges.empty()) {
      Range& last = ranges.back();
      const std::size_t end = last.offset + last.bytes;
      if (r.offset >= end && r.offset - end <= kCoalesceGap && arena_.is_backed(end, r.offset - end)) {
        last.bytes = r.offset + r.bytes - last.offset;
        saved_.push_back(Saved{r, ranges.size() - 1});
        continue;
      }
    }
    ranges.push_back(r);
    saved_.push_back(Saved{r, ranges.size() - 1});
  }
  std::size_t total = 0;
  for (const Range& r : ranges) total += r.bytes;
  new_slabs.clear();
  slab_sizes_to_pin(total, new_slabs);
  std::vector<std::size_t> sizes;
  sizes.reserve(slabs_.size() + new_slabs.size());
  for (const PinnedSlab& s : slabs_) sizes.push_back(s.bytes);
  sizes.insert(sizes.end(), new_slabs.begin(), new_slabs.end());
  copies_.clear();
  std::size_t slab = 0, used = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    std::size_t done = 0;
    while (done < r.bytes) {
      if (used == sizes[slab]) {
        ++slab;
        used = 0;
      }
      const std::size_t n = std::min(r.bytes - done, sizes[slab] - used);
      copies_.push_back(Copy{r.offset + done, n, slab, used});
      done += n;
      used += n;
    }
  }
}

std::size_t PoolSleep::bytes_to_pin(std::size_t bytes) const noexcept {
  const std::size_t capacity = host_bytes_.load(std::memory_order_relaxed);
  if (capacity >= bytes) return 0;
  const std::size_t more = bytes - capacity;
  return more >= kMaxSleepHostBytes ? kMaxSleepHostBytes : round_up_to_slab(more);
}

void PoolSleep::slab_sizes_to_pin(std::size_t bytes, std::vector<std::size_t>& sizes) const {
  std::size_t capacity = host_bytes_.load(std::memory_order_relaxed);
  if (capacity >= bytes) return;
  // More slabs than this is more host memory than any host has (64 TiB of
  // 1 GiB slabs): refused as a failed allocation, before any rounding overflows.
  if ((bytes - capacity) / slab_bytes_ >= kMaxSlabs) throw std::bad_alloc();
  // At least two slabs per pinning thread (sleep_slab_pinner.hpp), so that
  // each thread pins several and the copies into the first start while the
  // rest are pinned; no smaller than kSleepMinSlabBytes, no larger than
  // slab_bytes_.
  const std::size_t piece =
      std::min(slab_bytes_, std::max(kSleepMinSlabBytes, round_up_to_slab((bytes - capacity) / (2 * kMaxPinThreads))));
  while (capacity < bytes) {
    sizes.push_back(std::min(round_up_to_slab(bytes - capacity), piece));
    capacity += sizes.back();
  }
}

cudaError_t PoolSleep::enqueue_backup(std::size_t slab) noexcept {
  // copies_ runs through the slabs in order: this slab's copies are adjacent.
  const auto first =
      std::lower_bound(copies_.begin(), copies_.end(), slab, [](const Copy& c, std::size_t s) { return c.slab < s; });
  for (auto c = first; c != copies_.end() && c->slab == slab; ++c) {
    if (const cudaError_t e = driver_.memcpy_async(host_address(*c), device_address(c->offset), c->bytes, copy_stream_);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

cudaError_t PoolSleep::pin_more(const std::vector<std::size_t>& sizes,
                                const std::function<cudaError_t(std::size_t slab)>& on_pinned) noexcept {
  if (sizes.empty()) return cudaSuccess;
  const std::size_t held = slabs_.size();
  std::vector<PinnedSlab> pinned;
  try {
    slabs_.reserve(held + sizes.size());
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  for (std::size_t bytes : sizes) slabs_.push_back(PinnedSlab{nullptr, bytes});  // reserved: no throw
  PinStep refused = PinStep::none;
  const cudaError_t error = pin_slabs(
      driver_, device_, sizes, pinned,
      [&](std::size_t i) {
        slabs_[held + i] = pinned[i];
        return on_pinned(held + i);
      },
      &refused);
  pin_refusal_.store(refused, std::memory_order_relaxed);
  if (error != cudaSuccess) {
    // All or nothing: the slabs this call pinned go again (after any copy
    // into them), unlocked and unmapped, and the pool keeps the host memory
    // it had.
    if (copy_stream_ != nullptr) (void)drain_copies();
    for (const PinnedSlab& p : pinned) unpin_host_slab(driver_, p);
    slabs_.resize(held);
    return error;
  }
  std::size_t capacity = 0;
  for (const PinnedSlab& s : slabs_) capacity += s.bytes;
  host_bytes_.store(capacity, std::memory_order_relaxed);
  return cudaSuccess;
}

cudaError_t PoolSleep::reserve_host_memory(std::size_t bytes) noexcept {
  const std::unique_lock host = settle_pin_ahead();
  pin_refusal_.store(PinStep::none, std::memory_order_relaxed);  // this call's, if it pins
  // The budget first, on the capped size: any size beyond it is the budget's
  // refusal (counted), before slab sizes are laid out (which may fail).
  if (!within_budget(bytes_to_pin(bytes))) return cudaErrorMemoryAllocation;
  // The size asked, not what is left to pin: 64 TiB with some memory held
  // already is as far beyond any host.
  if (bytes >= kMaxSleepHostBytes) return cudaErrorMemoryAllocation;
  std::vector<std::size_t> sizes;
  try {
    slab_sizes_to_pin(bytes, sizes);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  return pin_more(sizes, [](std::size_t) { return cudaSuccess; });
}

std::vector<PoolSleep::Range> PoolSleep::live_extents(const std::function<bool(std::size_t)>& still_live) const {
  std::vector<Range> extents;
  std::size_t last_range = 0, last_reach = 0;  // the last live block's range, and the end of its own bytes
  for (const Saved& s : saved_) {
    if (!still_live(s.block.offset)) continue;  // freed while asleep: free memory now, its backup dropped
    const std::size_t reach = s.block.offset + std::max(s.block.owned, s.block.bytes);
    // The bytes between the last live block's and this one are the last
    // one's own (its rounding): one copy. Anything else between (a gap, a
    // block freed since) is the pool's to hand out: the copy splits there.
    if (!extents.empty() && s.range == last_range && s.block.offset <= last_reach) {
      extents.back().bytes = s.block.offset + s.block.bytes - extents.back().offset;
    } else {
      extents.push_back(Range{s.block.offset, s.block.bytes, 0});
    }
    last_range = s.range;
    last_reach = reach;
  }
  return extents;
}

cudaError_t PoolSleep::enqueue_restore(const Range& extent) noexcept {
  const std::size_t end = extent.offset + extent.bytes;
  // The first copy ending past the extent's start; copies_ is in address order.
  auto c = std::upper_bound(copies_.begin(), copies_.end(), extent.offset,
                            [](std::size_t at, const Copy& copy) { return at < copy.offset + copy.bytes; });
  for (; c != copies_.end() && c->offset < end; ++c) {
    const std::size_t from = std::max(extent.offset, c->offset);
    const std::size_t to = std::min(end, c->offset + c->bytes);
    const void* host = static_cast<const char*>(host_address(*c)) + (from - c->offset);
    if (const cudaError_t e = driver_.memcpy_async(device_address(from), host, to - from, copy_stream_);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

void PoolSleep::plan_zeroing(const std::vector<Range>& live) {
  saved_.clear();
  saved_.reserve(live.size());
  // One "range" for all: nothing is copied, so a zeroing may join any two
  // blocks that touch (the first's own bytes reaching the second).
  for (const Range& r : live) {
    if (r.bytes != 0) saved_.push_back(Saved{r, 0});
  }
}

cudaError_t PoolSleep::enqueue_zero(const Range& extent) noexcept {
  return driver_.memset_async(device_address(extent.offset), 0, extent.bytes, copy_stream_);
}

cudaError_t PoolSleep::drain_copies() noexcept { return driver_.stream_synchronize(copy_stream_); }

cudaError_t PoolSleep::release_chunks() noexcept {
  slept_ = true;
  cudaError_t error;
  try {
    error = arena_.unback_all(released_);
  } catch (const std::bad_alloc&) {
    error = cudaErrorMemoryAllocation;
  }
  std::size_t bytes = 0;
  for (const Arena::Extent& e : released_) bytes += e.granules * arena_.granularity();
  asleep_bytes_.store(bytes, std::memory_order_relaxed);
  return error;
}

cudaError_t PoolSleep::sleep(SleepMode mode, cudaStream_t stream,
                             const std::function<void(std::vector<Range>&)>& gather_live) noexcept {
  const std::unique_lock host = settle_pin_ahead();  // a slab being pinned ahead is waited for, then used
  if (slept_) return release_chunks();               // idempotent; finishes a sleep a failure cut short
  asleep_.store(true, std::memory_order_seq_cst);  // allocations refused from here on
  pin_refusal_.store(PinStep::none, std::memory_order_relaxed);  // this sleep's, if it pins
  const cudaError_t error = back_up(mode, stream, gather_live);
  if (error != cudaSuccess) {
    copies_.clear();
    saved_.clear();
    asleep_.store(false, std::memory_order_release);  // awake, as before the call
    return error;
  }
  return release_chunks();
}

cudaError_t PoolSleep::back_up(SleepMode mode, cudaStream_t stream,
                               const std::function<void(std::vector<Range>&)>& gather_live) noexcept {
  if (const cudaError_t e = ensure_stream(); e != cudaSuccess) return e;
  copies_.clear();
  saved_.clear();
  std::vector<std::size_t> new_slabs;  // the host memory this sleep must pin first
  zero_on_wake_ = mode == SleepMode::discard_zeroed;
  if (zero_on_wake_) {
    // Refused before anything changes where wake could not zero: a memset
    // of 0 bytes asks the driver, enqueuing nothing.
    if (const cudaError_t e = driver_.memset_async(device_address(0), 0, 0, copy_stream_); e != cudaSuccess) return e;
  }
  if (mode != SleepMode::discard) {  // the live blocks: copied (backup) or zeroed on wake
    try {
      std::vector<Range> live;
      gather_live(live);
      if (zero_on_wake_) {
        plan_zeroing(live);
      } else {
        plan_copies(live, new_slabs);
      }
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
    // Beyond the budget: refused before any copy, the pool awake as it was.
    std::size_t more = 0;
    for (const std::size_t bytes : new_slabs) more += bytes;
    if (!within_budget(more)) return cudaErrorMemoryAllocation;
  }
  // Only the work the caller ordered before this call: an event on its stream.
  if (const cudaError_t e = driver_.event_record(caller_event_, stream); e != cudaSuccess) return e;
  if (copies_.empty()) return driver_.event_synchronize(caller_event_);  // nothing to copy: discard, or no live block
  if (const cudaError_t e = driver_.stream_wait_event(copy_stream_, caller_event_); e != cudaSuccess) return e;
  // The slabs held copy at once; each slab to pin copies as soon as it is
  // pinned, while the others are still being pinned (sleep_slab_pinner.hpp).
  const std::size_t held = slabs_.size();
  for (std::size_t slab = 0; slab < held; ++slab) {
    if (const cudaError_t e = enqueue_backup(slab); e != cudaSuccess) {
      (void)drain_copies();  // before anything may touch the slabs again
      return e;
    }
  }
  if (const cudaError_t e = pin_more(new_slabs, [this](std::size_t slab) { return enqueue_backup(slab); });
      e != cudaSuccess) {
    return e;  // pin_more waited for the copies and freed what it pinned
  }
  // A host wait on the copy stream's own event: the copies (and, through the
  // wait above, the caller's earlier work) are done; no device synchronize.
  const cudaError_t recorded = driver_.event_record(copy_event_, copy_stream_);
  return recorded == cudaSuccess ? driver_.event_synchronize(copy_event_) : drain_copies();
}

cudaError_t PoolSleep::wake(cudaStream_t stream, const std::function<bool(std::size_t)>& still_live) noexcept {
  if (!asleep()) return cudaSuccess;
  const std::unique_lock host = settle_pin_ahead();  // asleep: none is pinned, but slabs_ is read under host_mu_
  // Published before the live blocks are read: a free from here on orders
  // itself after this wake's copies (restore_pending says why that closes
  // the race). Asleep, so no earlier wake's copies are pending (the sleep
  // drained them).
  restore_phase_.store(kWaking, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::vector<Range> extents;  // what to restore: decided before anything is made
  std::vector<PhysicalHandle> handles;
  // A failed wake leaves the pool asleep, its copies drained: nothing pending.
  auto failed = [&](cudaError_t error) {
    restore_phase_.store(kNoRestore, std::memory_order_release);
    return error;
  };
  try {
    extents = live_extents(still_live);
    if (const cudaError_t e = arena_.reback(released_, handles); e != cudaSuccess) return failed(e);
  } catch (const std::bad_alloc&) {
    return failed(cudaErrorMemoryAllocation);
  }
  auto undo = [&](cudaError_t error) {
    (void)drain_copies();
    arena_.unreback(released_, handles);
    return failed(error);
  };
  for (const Range& extent : extents) {
    const cudaError_t e = zero_on_wake_ ? enqueue_zero(extent) : enqueue_restore(extent);
    if (e != cudaSuccess) return undo(e);
  }
  bool pending = false;
  if (!extents.empty()) {
    // Later work on the caller's stream sees the contents (or the zeros);
    // wake returns at once. Frees on other streams meanwhile wait too
    // (order_after_restore): a memset, like a copy, must not write a block
    // that was freed and handed out again.
    cudaError_t e = driver_.event_record(copy_event_, copy_stream_);
    pending = e == cudaSuccess;
    if (e == cudaSuccess) e = driver_.stream_wait_event(stream, copy_event_);
    if (e != cudaSuccess) {
      if (drain_copies() != cudaSuccess) return undo(e);
      pending = false;  // drained: the restore is done
    }
  }
  try {
    arena_.rebacked(released_, handles);
  } catch (const std::bad_alloc&) {
    return undo(cudaErrorMemoryAllocation);
  }
  released_.clear();
  saved_.clear();  // copies_ stays: the last backup, for backup_at (pool_sleep.hpp)
  slept_ = false;
  asleep_bytes_.store(0, std::memory_order_relaxed);
  restore_phase_.store(pending ? kRestoring : kNoRestore, std::memory_order_release);
  asleep_.store(false, std::memory_order_release);
  return cudaSuccess;
}

std::uint8_t PoolSleep::wait_while_waking() const noexcept {
  // A wake enqueues and returns without waiting for the device: this waits
  // for host work (maps and enqueues) of at most one wake.
  std::uint8_t phase = restore_phase_.load(std::memory_order_acquire);
  while (phase == kWaking) {
    std::this_thread::yield();
    phase = restore_phase_.load(std::memory_order_acquire);
  }
  return phase;
}

void PoolSleep::wait_for_restore() noexcept {
  if (wait_while_waking() == kNoRestore) return;
  if (driver_.event_synchronize(copy_event_) == cudaSuccess || drain_copies() == cudaSuccess) {
    std::uint8_t restoring = kRestoring;  // a later wake may have begun meanwhile: its phase stays
    restore_phase_.compare_exchange_strong(restoring, kNoRestore, std::memory_order_relaxed);
  }
}

void PoolSleep::order_after_restore(cudaStream_t stream) noexcept {
  if (wait_while_waking() == kNoRestore) return;
  if (driver_.event_query(copy_event_) == cudaSuccess) {
    std::uint8_t restoring = kRestoring;  // done: frees need not ask again (a later wake's phase stays)
    restore_phase_.compare_exchange_strong(restoring, kNoRestore, std::memory_order_relaxed);
    return;
  }
  // An event re-recorded meanwhile (the next sleep's copies) makes the wait
  // longer, never unsafe. Where the stream cannot wait, the host does.
  if (driver_.stream_wait_event(stream, copy_event_) != cudaSuccess) (void)driver_.event_synchronize(copy_event_);
}

std::pair<const void*, std::size_t> PoolSleep::backup_at(std::size_t offset, std::size_t bytes) noexcept {
  const std::lock_guard lock(host_mu_);  // slabs_ may grow on the pin-ahead thread
  // The first copy ending past `offset`; copies_ is in address order.
  const auto c = std::upper_bound(copies_.begin(), copies_.end(), offset,
                                  [](std::size_t at, const Copy& copy) { return at < copy.offset + copy.bytes; });
  if (c == copies_.end() || c->offset > offset || bytes == 0) return {nullptr, 0};
  const std::size_t there = std::min(bytes, c->offset + c->bytes - offset);
  return {static_cast<const char*>(host_address(*c)) + (offset - c->offset), there};
}

cudaError_t PoolSleep::release_host_memory() noexcept {
  const std::unique_lock host = settle_pin_ahead();  // a slab in flight is released too
  if (asleep()) return cudaErrorNotPermitted;
  if (copy_stream_ != nullptr) {
    if (const cudaError_t e = drain_copies(); e != cudaSuccess) return e;
  }
  for (const PinnedSlab& s : slabs_) unpin_host_slab(driver_, s);  // unlocked and unmapped: RSS drops
  slabs_.clear();
  copies_.clear();  // the last backup was in them
  host_bytes_.store(0, std::memory_order_relaxed);
  pinned_ahead_bytes_.store(0, std::memory_order_relaxed);
  releases_.fetch_add(1, std::memory_order_release);  // a pin decided before this one is not made
  return cudaSuccess;
}

}  // namespace sova::detail
