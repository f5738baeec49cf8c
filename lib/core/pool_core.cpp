// PoolCore construction, destruction and the fast paths.
#include "core/pool_core.hpp"
#include "base/no_gpu_hint.hpp"

#include "arena/physical_options.hpp"
#include "core/clock.hpp"

#include "core/release_worker.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

namespace sova::detail {

namespace {

DeviceInfo query_device(Driver& driver, int device) {
  int count = 0;
  cudaError_t error = driver.device_count(&count);
  if (error != cudaSuccess) {
    throw Error(std::string("sova: no usable device (") + driver.name() + " driver: " + cudaGetErrorName(error) +
                    (means_no_gpu(error) ? std::string("): ") + kNoGpuHint : std::string(")")),
                error);
  }
  if (device < 0 || device >= count) {
    throw Error("sova: device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                    (count == 1 ? " device)" : " devices)"),
                cudaErrorInvalidDevice);
  }
  DeviceInfo info;
  error = driver.device_info(device, &info);
  if (error != cudaSuccess) {
    throw Error(std::string("sova: querying device failed: ") + cudaGetErrorName(error), error);
  }
  if (!info.vmm_supported) {
    throw Error("sova: device " + std::to_string(device) + " (" + info.name +
                    ") does not support CUDA virtual memory management, which sova is built on",
                cudaErrorNotSupported);
  }
  const std::size_t g = info.granularity;
  if (g < kAlignment || (g & (g - 1)) != 0) {
    throw Error("sova: unexpected VMM granularity " + std::to_string(g), cudaErrorNotSupported);
  }
  return info;
}

std::size_t va_bytes_for(const PoolOptions& options, const DeviceInfo& info) {
  if (options.va_reserve != 0) return options.va_reserve;
  // A limit beyond the device's memory is the device's memory: the pool can
  // never hold more, and twice a larger one overflowed.
  const std::size_t limit =
      std::min(options.max_size != 0 ? options.max_size : info.total_memory, std::min(info.total_memory, SIZE_MAX / 2));
  return 2 * limit;
}

/// PoolCore::largest_request_: the pool's max_size and, for device memory,
/// the device's memory, in whole granules, within the VA range. (A host
/// memory pool, host_numa_node, is not bounded by the device's memory.)
std::size_t largest_request_of(const PoolOptions& options, const Arena& arena, const DeviceInfo& info) {
  std::size_t limit = arena.max_physical() != 0 ? arena.max_physical() : SIZE_MAX;
  if (options.host_numa_node < 0) limit = std::min(limit, info.total_memory);
  return std::min(limit / info.granularity * info.granularity, arena.size());
}

Driver& driver_of(const PoolOptions& options) { return options.driver != nullptr ? *options.driver : process_driver(); }

/// The part of `options` about what the arena's chunks are made of.
PhysicalOptions physical_options_of(const PoolOptions& options) {
  return {options.device, options.handle_types, options.compressible, options.host_numa_node};
}

}  // namespace

PoolCore::PoolCore(const PoolOptions& options)
    : driver_(driver_of(options)),
      device_(options.device),
      info_(for_physical_options(driver_, query_device(driver_, options.device), physical_options_of(options))),
      arena_(driver_, device_, info_.granularity, va_bytes_for(options, info_), options.max_size, options.max_chunk,
             physical_props_for(physical_options_of(options), info_)),
      largest_request_(largest_request_of(options, arena_, info_)),
      placement_(options, arena_.size() / 2 / info_.granularity * info_.granularity),
      heap_(
          arena_.size(), info_.granularity, placement_,
          [](void* self) noexcept { static_cast<PoolCore*>(self)->caches_.synchronize_devices(); }, this),
      caches_(driver_, device_, options.check_streams, heap_, arena_),
      remapper_(arena_, heap_),
      remap_(options.remap),
      budget_(options.remap && options.remap_effort == RemapEffort::thorough),
      release_threshold_(options.release_threshold),
      reuse_follow_event_dependencies_(options.reuse_follow_event_dependencies),
      reuse_allow_opportunistic_(options.reuse_allow_opportunistic),
      reuse_allow_internal_dependencies_(options.reuse_allow_internal_dependencies),
      check_streams_(options.check_streams),
      sleep_(driver_, device_, arena_, kSleepSlabBytes, options.sleep_host_budget),
      pin_ahead_(sleep_, options.sleep_pin_ahead) {
  arena_.set_ghost_settler(
      [](void* self, const Arena::GhostPin& pin) noexcept { return static_cast<PoolCore*>(self)->settle_ghost(pin); },
      this);
  // No device synchronize while a capture that allocated here may be in progress.
  caches_.pause_synchronizes_while(&graphs_.memory().open_captures());
  register_for_release(this);
}

PoolCore::~PoolCore() {
  pin_ahead_.stop();  // waits for a pin in flight, whose slab sleep_ then frees
  unregister_for_release(this);
  if (!caches_.wait_for_all_work()) {
    // Refused: a capture runs on the device (the synchronize invalidated it).
    // Work queued on this memory may still run and nothing else can say when
    // it ends: the memory stays mapped to the process's end rather than be
    // unmapped under that work (docs/graphs.md, "Captures sova does not know").
    arena_.abandon();
  }
  // Then caches_ destroys the events, and arena_ unmaps and releases every
  // chunk and frees the reservation.
}

cudaError_t PoolCore::allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;  // as cudaMallocAsync: success, NULL (measured)
  // Asleep (Pool::sleep): nothing to give until wake. Not counted as a
  // failed allocation: the heap lock may be held by the sleep's copies.
  if (sleep_.asleep()) [[unlikely]]
    return cudaErrorNotPermitted;
  // The memory of released graphs goes back first (one atomic load), on
  // every stream: docs/graphs.md, "When memory comes back".
  if (graphs_.memory().has_released()) [[unlikely]]
    graphs_.memory().collect();
  // More than the pool may ever hold (beyond_limit: its max_size, the
  // device's memory, its VA range): refused here, before the slow path,
  // whose last steps flush every cache and release free memory to make room
  // — for a request that can never fit, a refusal that would change the
  // pool (README: a failed allocation changes nothing). One compare, the
  // one a request beyond the VA range always had.
  if (beyond_limit(bytes)) [[unlikely]] {
    std::lock_guard<HeapMutex> lock(heap_.mutex());
    ++stats_.failed_allocations;
    return cudaErrorMemoryAllocation;
  }
  const std::size_t size = placement_.block_size(bytes);
  if (size == 0 || size > arena_.size()) {
    std::lock_guard<HeapMutex> lock(heap_.mutex());
    ++stats_.failed_allocations;
    return size == 0 ? cudaErrorInvalidValue : cudaErrorMemoryAllocation;  // 0: a user's policy broke its contract
  }
  const std::size_t need = placement_.backing(bytes, size);
  cudaError_t refusal = cudaErrorMemoryAllocation;
  StreamState* state = caches_.find(stream, &refusal);
  if (state == nullptr) return refusal;  // no stream (judge_stream), or no host memory
  if (check_streams_ && !state->is_legacy()) {
    // Under capture, graph memory (graph_memory.hpp). Outside: captures that
    // allocated on this stream are over (inline: one atomic load).
    bool capturing = false;
    if (const cudaError_t error = driver_.stream_is_capturing(stream, &capturing); error != cudaSuccess) return error;
    if (capturing) {
      // No id check under capture (cuStreamGetId would break it), so no
      // renewal: where a destroyed stream's handle came back as another
      // device's stream, only asking tells (the C API routes by it:
      // Pool::stream_device). Graph memory is the slow path already.
      caches_.learn_device(state, stream);
      return graphs_.memory().allocate(ptr, bytes, stream);
    }
    graphs_.memory().outside_capture(stream);
    // A new stream may have the handle of a destroyed one, whose frees may
    // still be pending: it must not pop them as its own.
    unsigned long long id = 0;
    if (const cudaError_t error = driver_.stream_id(stream, &id); error != cudaSuccess) return error;
    if (id != state->stream_id()) {
      state = caches_.renew(state, id);
      if (state == nullptr) return cudaErrorMemoryAllocation;
    }
  }

  // Fast path: a block of exactly this size freed earlier on this stream
  // (above kLargestCachedBlock, only the block this stream freed last).
  if (Block* block = caches_.take_cached(state, size, need, bytes, stream)) {
    *ptr = reinterpret_cast<void*>(arena_.base() + block->offset);
    return cudaSuccess;
  }
  return allocate_slow(ptr, bytes, size, need, state, stream);
}

cudaError_t PoolCore::deallocate(void* ptr, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return cudaSuccess;
  // Released graphs first (one atomic load): a block of theirs is then an
  // ordinary block, judged as one (refused under capture, stamped on `stream`).
  if (graphs_.memory().has_released()) [[unlikely]]
    graphs_.memory().collect();
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return cudaErrorInvalidValue;
  const std::size_t offset = address - arena_.base();
  if (offset % kAlignment != 0) return cudaErrorInvalidValue;
  Block* block = heap_.find(offset);
  if (block == nullptr) return cudaErrorInvalidValue;  // not a block start: interior or never handed out
  // A block not live (a double free) is refused before the stream is looked
  // up, which on a stream the pool never saw would make it a state: a
  // refused call changes nothing. The state change in cache_freed stays the
  // judge (two frees of one block may race past this load).
  if (block->state.load(std::memory_order_acquire) != BlockState::live) return cudaErrorInvalidValue;
  // A graph's block: the graph keeps its memory (graph_memory.hpp). Other
  // blocks never look in the graphs' table, however many graphs live.
  cudaError_t refusal = cudaErrorMemoryAllocation;
  StreamState* state = caches_.find(stream, &refusal);
  if (state == nullptr) return refusal;  // no stream (judge_stream), or no host memory
  if (block->graph_memory.load(std::memory_order_relaxed)) {
    // The state, not the handle, goes with a graph output's free: at the
    // graph's release the handle may name nothing (free_graph_output).
    if (cudaError_t result = cudaSuccess; graphs_.memory().deallocate(ptr, stream, state, &result)) return result;
  }
  // No identity check here: a free on a reused handle is stamped with the
  // state's open epoch, which only a fence recorded with this very handle closes.
  if (check_streams_ && !state->is_legacy()) {
    if (const cudaError_t error = refuse_capture(stream); error != cudaSuccess) return error;
    // Outside capture: captures that allocated on this stream are over, as
    // for an allocation (inline: one atomic load).
    graphs_.memory().outside_capture(stream);
  }
  return free_stamped(block, offset, state, stream, /*may_fence=*/true);
}

cudaError_t PoolCore::free_released_graph_block(void* ptr, cudaStream_t stream) noexcept {
  // Complete for every stream at once (PoolGraphs::give_back): not before a
  // wake's restore, which may still write the block, is done.
  sleep_.wait_for_restore();
  std::size_t offset = 0;
  Block* block = block_starting_at(ptr, &offset);
  if (block == nullptr) return cudaErrorInvalidValue;
  cudaError_t refusal = cudaErrorMemoryAllocation;
  StreamState* state = caches_.find(stream, &refusal);
  if (state == nullptr) return refusal;  // no stream (judge_stream), or no host memory
  return free_stamped(block, offset, state, stream, /*may_fence=*/true);
}

cudaError_t PoolCore::free_graph_output(void* ptr, StreamState* freer) noexcept {
  sleep_.wait_for_restore();  // no handle to order: the host waits (as free_released_graph_block)
  std::size_t offset = 0;
  Block* block = block_starting_at(ptr, &offset);
  if (block == nullptr || freer == nullptr) return cudaErrorInvalidValue;
  return free_stamped(block, offset, freer, nullptr, /*may_fence=*/false);
}

void PoolCore::set_requested(void* ptr, std::size_t bytes) noexcept {
  std::size_t offset = 0;
  if (Block* block = block_starting_at(ptr, &offset)) caches_.set_requested(block, bytes);
}

cudaError_t PoolCore::free_stamped(Block* block, std::size_t offset, StreamState* state, cudaStream_t stream,
                                   bool may_fence) noexcept {
  // During a wake, or right after it, its restore may still write this block:
  // the free is ordered after it before the block can be taken (one load
  // otherwise). Asked after the block left the live state, while a wake
  // publishes its phase before it reads which blocks are live: either the
  // wake sees this free (the block is not restored) or this free sees the
  // wake. `may_fence` false: no stream to order (a graph's output freed at
  // its release), so the host waits.
  auto order_after_wake = [&]() noexcept {
    if (sleep_.restore_pending()) [[unlikely]] {
      if (may_fence) {
        sleep_.order_after_restore(stream);
      } else {
        sleep_.wait_for_restore();
      }
    }
  };
  // No question of the stream's device here: StreamRegistry::learn_device.
  return caches_.cache_freed(block, offset, state, stream, may_fence, info_.granularity, release_threshold_,
                             order_after_wake)
             ? cudaSuccess
             : cudaErrorInvalidValue;  // double free, or a block not live
}

void PoolCore::mark_graph_memory(void* ptr) noexcept {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return;
  if (Block* block = heap_.find(address - arena_.base())) block->graph_memory.store(true, std::memory_order_relaxed);
}

cudaError_t PoolCore::refuse_capture(cudaStream_t stream) noexcept {
  // A free under capture of a block that is not graph memory (allocated
  // before the capture): the free would take effect at each launch, while
  // the block's earlier work ran outside the graph, on streams the graph does
  // not follow. sova refuses, changing nothing (docs/graphs.md).
  bool capturing = false;
  const cudaError_t error = driver_.stream_is_capturing(stream, &capturing);
  if (error != cudaSuccess) return error;
  return capturing ? cudaErrorStreamCaptureUnsupported : cudaSuccess;
}

std::size_t PoolCore::block_size(const void* ptr) const noexcept {
  std::size_t offset = 0;
  const Block* block = block_starting_at(ptr, &offset);
  if (block == nullptr || block->state.load(std::memory_order_acquire) != BlockState::live) return 0;
  return block->requested;
}

cudaError_t PoolCore::stream_synchronized(cudaStream_t stream) noexcept {
  cudaError_t refusal = cudaErrorMemoryAllocation;
  StreamState* state = caches_.find(stream, &refusal);
  if (state == nullptr) return refusal;  // no stream (judge_stream), or no host memory
  caches_.stream_synchronized(state, stream);
  return cudaSuccess;
}

cudaError_t PoolCore::chunks_under(const void* ptr, std::size_t bytes, std::vector<ChunkView>* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return cudaErrorInvalidValue;
  std::lock_guard lock(heap_.mutex());
  // Only a live block's start: its chunks cannot move or go while it lives
  // (remapping and release take only chunks wholly inside free memory).
  const Block* block = heap_.find(address - arena_.base());
  if (block == nullptr || block->state.load(std::memory_order_acquire) != BlockState::live) {
    return cudaErrorInvalidValue;
  }
  if (bytes == 0) bytes = block->requested;
  if (bytes == 0 || bytes > block->size) return cudaErrorInvalidValue;
  std::vector<Arena::ChunkInfo> chunks;
  try {
    if (!arena_.chunks_touching(block->offset, bytes, chunks)) return cudaErrorInvalidValue;
    out->clear();
    for (const Arena::ChunkInfo& c : chunks) {
      out->push_back(
          ChunkView{c.first_granule * arena_.granularity(), c.granules * arena_.granularity(), c.handle, c.serial});
    }
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

}  // namespace sova::detail
