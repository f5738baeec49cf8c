// PoolSleep (pool_sleep.hpp): the order of sleep and wake, and what each
// failure leaves.
#include "core/pool_sleep.hpp"

#include <algorithm>
#include <new>

namespace sova::detail {

namespace {
/// Live ranges closer than this are copied as one, when the gap is backed:
/// fewer copies, at the price of a few free bytes.
constexpr std::size_t kCoalesceGap = std::size_t{1} << 20;
/// Slabs are taken in multiples of this.
constexpr std::size_t kSlabRounding = std::size_t{2} << 20;
}  // namespace

PoolSleep::~PoolSleep() {
  if (copy_stream_ != nullptr) {
    (void)driver_.stream_synchronize(copy_stream_);  // our copies only
    (void)driver_.stream_destroy(copy_stream_);
  }
  if (caller_event_ != nullptr) (void)driver_.event_destroy(caller_event_);
  if (copy_event_ != nullptr) (void)driver_.event_destroy(copy_event_);
  for (const Slab& s : slabs_) (void)driver_.host_free(s.ptr);
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

cudaError_t PoolSleep::plan_copies(const std::vector<Range>& live) {
  // Coalesce first, then lay the ranges out over the slabs in order, a range
  // split where a slab ends.
  std::vector<Range> ranges;
  ranges.reserve(live.size());
  coalesced_.clear();
  block_starts_.clear();
  block_starts_.reserve(live.size());
  for (const Range& r : live) {
    if (r.bytes == 0) continue;
    block_starts_.push_back(r.offset);
    if (!ranges.empty()) {
      Range& last = ranges.back();
      const std::size_t end = last.offset + last.bytes;
      if (r.offset >= end && r.offset - end <= kCoalesceGap && arena_.is_backed(end, r.offset - end)) {
        last.bytes = r.offset + r.bytes - last.offset;
        ++coalesced_.back().count;
        continue;
      }
    }
    ranges.push_back(r);
    coalesced_.push_back(Coalesced{block_starts_.size() - 1, 1});
  }
  std::size_t total = 0;
  for (const Range& r : ranges) total += r.bytes;
  std::size_t capacity = 0;
  for (const Slab& s : slabs_) capacity += s.bytes;
  while (capacity < total) {
    const std::size_t want = (total - capacity + kSlabRounding - 1) / kSlabRounding * kSlabRounding;
    Slab slab;
    slab.bytes = std::min(want, kSleepSlabBytes);
    slabs_.reserve(slabs_.size() + 1);
    if (const cudaError_t e = driver_.host_alloc(slab.bytes, &slab.ptr); e != cudaSuccess) return e;
    slabs_.push_back(slab);  // reserved: no throw
    capacity += slab.bytes;
    host_bytes_.store(capacity, std::memory_order_relaxed);
  }
  copies_.clear();
  std::size_t slab = 0, used = 0;
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    std::size_t done = 0;
    while (done < r.bytes) {
      if (used == slabs_[slab].bytes) {
        ++slab;
        used = 0;
      }
      const std::size_t n = std::min(r.bytes - done, slabs_[slab].bytes - used);
      copies_.push_back(Copy{r.offset + done, n, slab, used, i});
      done += n;
      used += n;
    }
  }
  return cudaSuccess;
}

bool PoolSleep::any_live(std::size_t range, const std::function<bool(std::size_t)>& still_live) const {
  const Coalesced& c = coalesced_[range];
  for (std::size_t i = c.first; i < c.first + c.count; ++i) {
    if (still_live(block_starts_[i])) return true;
  }
  return false;
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
  if (slept_) return release_chunks();             // idempotent; finishes a sleep a failure cut short
  asleep_.store(true, std::memory_order_seq_cst);  // allocations refused from here on
  const cudaError_t error = back_up(mode, stream, gather_live);
  if (error != cudaSuccess) {
    copies_.clear();
    asleep_.store(false, std::memory_order_release);  // awake, as before the call
    return error;
  }
  return release_chunks();
}

cudaError_t PoolSleep::back_up(SleepMode mode, cudaStream_t stream,
                               const std::function<void(std::vector<Range>&)>& gather_live) noexcept {
  if (const cudaError_t e = ensure_stream(); e != cudaSuccess) return e;
  copies_.clear();
  if (mode == SleepMode::backup) {
    try {
      std::vector<Range> live;
      gather_live(live);
      if (const cudaError_t e = plan_copies(live); e != cudaSuccess) return e;
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
  }
  // Only the work the caller ordered before this call: an event on its stream.
  if (const cudaError_t e = driver_.event_record(caller_event_, stream); e != cudaSuccess) return e;
  if (copies_.empty()) return driver_.event_synchronize(caller_event_);
  if (const cudaError_t e = driver_.stream_wait_event(copy_stream_, caller_event_); e != cudaSuccess) return e;
  for (const Copy& c : copies_) {
    if (const cudaError_t e = driver_.memcpy_async(host_address(c), device_address(c.offset), c.bytes, copy_stream_);
        e != cudaSuccess) {
      (void)drain_copies();  // before anything may touch the slabs again
      return e;
    }
  }
  // A host wait on the copy stream's own event: the copies (and, through the
  // wait above, the caller's earlier work) are done; no device synchronize.
  const cudaError_t recorded = driver_.event_record(copy_event_, copy_stream_);
  return recorded == cudaSuccess ? driver_.event_synchronize(copy_event_) : drain_copies();
}

cudaError_t PoolSleep::wake(cudaStream_t stream, const std::function<bool(std::size_t)>& still_live) noexcept {
  if (!asleep()) return cudaSuccess;
  std::vector<PhysicalHandle> handles;
  try {
    if (const cudaError_t e = arena_.reback(released_, handles); e != cudaSuccess) return e;
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  auto undo = [&](cudaError_t error) {
    (void)drain_copies();
    arena_.unreback(released_, handles);
    return error;
  };
  bool copied = false;
  for (const Copy& c : copies_) {
    bool live = true;
    try {
      live = any_live(c.range, still_live);
    } catch (...) {
    }
    if (!live) continue;  // freed while asleep: its backup is dropped
    if (const cudaError_t e = driver_.memcpy_async(device_address(c.offset), host_address(c), c.bytes, copy_stream_);
        e != cudaSuccess) {
      return undo(e);
    }
    copied = true;
  }
  if (copied) {
    // Later work on the caller's stream sees the contents; wake returns at once.
    cudaError_t e = driver_.event_record(copy_event_, copy_stream_);
    if (e == cudaSuccess) e = driver_.stream_wait_event(stream, copy_event_);
    if (e != cudaSuccess && drain_copies() != cudaSuccess) return undo(e);
  }
  try {
    arena_.rebacked(released_, handles);
  } catch (const std::bad_alloc&) {
    return undo(cudaErrorMemoryAllocation);
  }
  released_.clear();
  copies_.clear();
  slept_ = false;
  asleep_bytes_.store(0, std::memory_order_relaxed);
  asleep_.store(false, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t PoolSleep::release_host_memory() noexcept {
  if (asleep()) return cudaErrorNotPermitted;
  if (copy_stream_ != nullptr) {
    if (const cudaError_t e = drain_copies(); e != cudaSuccess) return e;
  }
  for (const Slab& s : slabs_) (void)driver_.host_free(s.ptr);
  slabs_.clear();
  host_bytes_.store(0, std::memory_order_relaxed);
  return cudaSuccess;
}

}  // namespace sova::detail
