// PoolCore's sleep and wake: the heap lock held across each, so that the
// pool neither grows nor remaps meanwhile; the order and the failures are
// PoolSleep's (pool_sleep.hpp).
#include "core/pool_core.hpp"
#include "core/stream_check.hpp"

#include <algorithm>
#include <new>

namespace sova::detail {

cudaError_t PoolCore::judge_sleep_stream(cudaStream_t stream) noexcept {
  // Sleep and wake order copies, memsets and events on `stream`: a value that
  // names no stream is refused before any of them (a wake on one restored the
  // pool, unordered; judge_stream, stream_check.hpp). Always asked of the
  // driver, whatever check_streams: one call, off the fast path, as the C
  // API's own check asks.
  bool capturing = false;
  return judge_stream(driver_, stream, /*ask_driver=*/true, &capturing);
}

cudaError_t PoolCore::sleep(SleepMode mode, cudaStream_t stream) noexcept {
  if (mode != SleepMode::backup && mode != SleepMode::discard && mode != SleepMode::discard_zeroed) {
    return cudaErrorInvalidValue;
  }
  if (const cudaError_t refusal = judge_sleep_stream(stream); refusal != cudaSuccess) return refusal;
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  // Live blocks only: cached ones (a stream's cache, the heap's free blocks)
  // are free to the user and sleep without a copy. A block moves from live
  // to cached under its stream's lock alone, so a free racing with this walk
  // may or may not be backed up: either is right, the free is final.
  return sleep_.sleep(mode, stream, [this](std::vector<PoolSleep::Range>& live) {
    for (const Block* b = heap_.find(0); b != nullptr; b = b->next) {
      // A live block's backed prefix (at least what was asked) is its own:
      // a restore may write it whole to join the block to the next.
      if (b->state.load(std::memory_order_acquire) == BlockState::live) {
        live.push_back({b->offset, b->requested, std::min(b->backed, b->size)});
      }
    }
  });
}

cudaError_t PoolCore::wake(cudaStream_t stream) noexcept {
  if (const cudaError_t refusal = judge_sleep_stream(stream); refusal != cudaSuccess) return refusal;
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  return sleep_.wake(stream, [this](std::size_t offset) {
    const Block* b = heap_.find(offset);
    return b != nullptr && b->state.load(std::memory_order_acquire) == BlockState::live;
  });
}

cudaError_t PoolCore::release_sleep_host_memory() noexcept {
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  // Given back on purpose: pin-ahead does not take it again until the pool
  // backs more than it ever did. Held before the release, so that no pin
  // decided before it lands after it (SleepPinAhead::run).
  const bool was_held = pin_ahead_.hold(arena_.backed_peak());
  const cudaError_t error = sleep_.release_host_memory();
  if (error != cudaSuccess) pin_ahead_.undo_hold(was_held);
  return error;
}

cudaError_t PoolCore::reserve_sleep_backup(std::size_t bytes) noexcept {
  std::lock_guard<HeapMutex> lock(heap_.mutex());
  const cudaError_t error = sleep_.reserve_host_memory(bytes);
  if (error == cudaSuccess) pin_ahead_.resume();  // the user asks for host memory: a hold is lifted
  return error;
}

const void* PoolCore::sleep_backup_at(const void* ptr, std::size_t bytes, std::size_t* there) noexcept {
  *there = 0;
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return nullptr;
  std::lock_guard<HeapMutex> lock(heap_.mutex());  // copies_ is the heap lock's
  const auto [host, bytes_there] = sleep_.backup_at(address - arena_.base(), bytes);
  *there = bytes_there;
  return host;
}

}  // namespace sova::detail
