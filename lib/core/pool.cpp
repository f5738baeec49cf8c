// sova::Pool: the public C++ face of PoolCore. Exceptions are made here, from
// the cudaError_t the core returns. The allocation log (core/alloc_log.hpp)
// hooks in here: every allocation and free of every pool, C API included,
// passes through one of the four calls below.
#include "base/raw_enum.hpp"
#include "core/alloc_log.hpp"
#include "core/pool_core.hpp"

#include <sova/pool.hpp>

#include <cstdio>
#include <string>

namespace sova {

namespace {

/// core.allocate, logged. Out of line: the log-off path stays one load and a branch.
[[gnu::noinline]] cudaError_t logged_allocate(detail::PoolCore& core, void** ptr, std::size_t bytes,
                                              cudaStream_t stream) noexcept {
  const cudaError_t error = core.allocate(ptr, bytes, stream);
  detail::log_allocate(error == cudaSuccess ? *ptr : nullptr, bytes, stream, error);
  return error;
}

/// core.deallocate, logged before the block goes back (the log's order,
/// alloc_log.hpp). A free the pool will refuse (not a live block) is not
/// logged; a double free racing with the first may be.
[[gnu::noinline]] cudaError_t logged_deallocate(detail::PoolCore& core, void* ptr, cudaStream_t stream) noexcept {
  if (const std::size_t bytes = core.block_size(ptr); bytes != 0) detail::log_free(ptr, bytes, stream);
  return core.deallocate(ptr, stream);
}

inline cudaError_t allocate_impl(detail::PoolCore& core, void** ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  if (detail::log_on()) [[unlikely]]
    return logged_allocate(core, ptr, bytes, stream);
  return core.allocate(ptr, bytes, stream);
}

inline cudaError_t deallocate_impl(detail::PoolCore& core, void* ptr, cudaStream_t stream) noexcept {
  if (detail::log_on() && ptr != nullptr) [[unlikely]]
    return logged_deallocate(core, ptr, stream);
  return core.deallocate(ptr, stream);
}

/// Pool::deallocate's message: what `ptr` is to the pool ("already freed",
/// "inside a block allocated at ..."), read after the free was refused.
[[gnu::cold]] std::string free_failure_message(detail::PoolCore& core, const void* ptr, cudaStream_t stream,
                                               cudaError_t error) {
  const detail::PointerStatus status = core.pointer_status(ptr);
  char head[160];
  if (status.kind == detail::PointerStatus::Kind::live) {
    // The block is fine: the stream was refused (under capture, an invalid handle).
    std::snprintf(head, sizeof head, "sova: freeing %p on stream %p failed (%s)", ptr, static_cast<void*>(stream),
                  cudaGetErrorName(error));
    if (error == cudaErrorInvalidResourceHandle) {
      return head + std::string(": the stream value names no stream (never created, or destroyed); the block "
                                "stays live: free it on a live stream, or 0");
    }
    return head;
  }
  std::snprintf(head, sizeof head, "sova: cannot free %p: ", ptr);
  return head + detail::describe_pointer_status(status) + " (" + cudaGetErrorName(error) + ")";
}

}  // namespace

Pool::Pool(const PoolOptions& options) : core_(std::make_unique<detail::PoolCore>(options)) {
  detail::log_register_pool(this);
}
Pool::~Pool() { detail::log_unregister_pool(this); }

void* Pool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* ptr = nullptr;
  const cudaError_t error = allocate_impl(*core_, &ptr, bytes, stream);
  if (error == cudaSuccess) return ptr;
  char head[160];
  std::snprintf(head, sizeof head, "sova: allocating %zu bytes on stream %p failed (%s): ", bytes,
                static_cast<void*>(stream), cudaGetErrorName(error));
  std::string message = head + describe_allocation_failure(bytes, error);
  if (error == cudaErrorMemoryAllocation) throw OutOfMemory(std::move(message), error);
  throw Error(message, error);
}

std::string Pool::describe_allocation_failure(std::size_t bytes, cudaError_t error) const {
  std::string why;
  if (core_->asleep()) {
    why = "the pool is asleep (Pool::sleep): wake it first";
  } else if (error == cudaErrorInvalidResourceHandle) {
    why = "the stream value names no stream (never created, or destroyed); pass a live stream, or 0 for the "
          "legacy default stream";
  } else if (error == cudaErrorMemoryAllocation && core_->beyond_limit(bytes)) {
    why = "larger than this pool can ever hold (its max size, or the device's memory); allocate less, or give "
          "the pool a larger max_size. " +
          core_->describe();
  } else if (error == cudaErrorMemoryAllocation) {
    why = "out of memory after this pool released what it could of its free memory; free blocks, trim other "
          "pools, or raise max_size. " +
          core_->describe();
  } else {
    why = core_->describe();
  }
  return why;
}

void Pool::deallocate(void* ptr, cudaStream_t stream) {
  const cudaError_t error = deallocate_impl(*core_, ptr, stream);
  if (error == cudaSuccess) return;
  throw Error(free_failure_message(*core_, ptr, stream, error), error);
}

std::string Pool::describe_pointer(const void* ptr) const {
  return detail::describe_pointer_status(core_->pointer_status(ptr));
}

cudaError_t Pool::try_allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  return allocate_impl(*core_, ptr, bytes, stream);
}
cudaError_t Pool::try_deallocate(void* ptr, cudaStream_t stream) noexcept {
  return deallocate_impl(*core_, ptr, stream);
}

void Pool::stream_synchronized(cudaStream_t stream) {
  const cudaError_t error = core_->stream_synchronized(stream);
  if (error != cudaSuccess) {
    throw Error(std::string("sova: stream_synchronized failed: ") + cudaGetErrorName(error), error);
  }
}

void Pool::trim_to(std::size_t bytes_to_keep) {
  const cudaError_t error = core_->trim_to(bytes_to_keep);
  if (error != cudaSuccess) throw Error(std::string("sova: trim failed: ") + cudaGetErrorName(error), error);
}

// Enum values are read as integers and checked here, before the core
// switches on them (lib/base/raw_enum.hpp says why).
cudaError_t Pool::set_attribute(cudaMemPoolAttr attr, const void* value) noexcept {
  if (!detail::known_pool_attr(detail::raw_enum(attr))) return cudaErrorInvalidValue;
  return core_->set_attribute(attr, value);
}
cudaError_t Pool::get_attribute(cudaMemPoolAttr attr, void* value) const noexcept {
  if (!detail::known_pool_attr(detail::raw_enum(attr))) return cudaErrorInvalidValue;
  return core_->get_attribute(attr, value);
}
cudaError_t Pool::set_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept {
  // Every descriptor's flags are checked before anything is stored: an empty
  // pool applies them to no chunk, and once stored they would fail every
  // later growth.
  for (std::size_t i = 0; descs != nullptr && i < count; ++i) {
    if (!detail::valid_access_flags(detail::raw_enum(descs[i].flags)) ||
        detail::raw_enum(descs[i].location.type) != cudaMemLocationTypeDevice) {
      return cudaErrorInvalidValue;
    }
  }
  return core_->set_access(descs, count);
}
cudaError_t Pool::get_access(cudaMemAccessFlags* flags, const cudaMemLocation* location) const noexcept {
  if (location != nullptr && detail::raw_enum(location->type) != cudaMemLocationTypeDevice) {
    return cudaErrorInvalidValue;
  }
  return core_->get_access(flags, location);
}

PoolStats Pool::stats() const { return core_->stats(); }
bool Pool::contains(const void* ptr) const noexcept { return core_->contains(ptr); }
std::size_t Pool::block_size(const void* ptr) const noexcept { return core_->block_size(ptr); }
int Pool::device() const noexcept { return core_->device(); }
int Pool::stream_device(cudaStream_t stream) noexcept { return core_->stream_device(stream); }
Driver& Pool::driver() const noexcept { return core_->driver(); }
void Pool::check_invariants() const { core_->check_invariants(); }

}  // namespace sova

namespace sova {

cudaError_t Pool::properties(const void* ptr, PhysicalProps* out) const noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  try {
    std::vector<ChunkView> chunks;  // checks that ptr is a live block (whose chunks then stay put)
    if (const cudaError_t err = core_->chunks_under(ptr, 1, &chunks); err != cudaSuccess) return err;
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  return core_->driver().properties_at(reinterpret_cast<std::uintptr_t>(ptr), out);
}

cudaError_t Pool::chunks_under(const void* ptr, std::size_t bytes, std::vector<ChunkView>* out) const {
  return core_->chunks_under(ptr, bytes, out);
}

std::uintptr_t Pool::va_base() const noexcept { return core_->arena().base(); }
std::size_t Pool::va_size() const noexcept { return core_->arena().size(); }
std::size_t Pool::granularity() const noexcept { return core_->arena().granularity(); }
const PhysicalProps& Pool::chunk_props() const noexcept { return core_->arena().props(); }

}  // namespace sova
