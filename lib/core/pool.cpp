// sova::Pool: the public C++ face of PoolCore. Exceptions are made here, from
// the cudaError_t the core returns.
#include "core/pool_core.hpp"
#include "core/raw_enum.hpp"

#include <sova/pool.hpp>

#include <cstdio>
#include <string>

namespace sova {

Pool::Pool(const PoolOptions& options) : core_(std::make_unique<detail::PoolCore>(options)) {}
Pool::~Pool() = default;

void* Pool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* ptr = nullptr;
  const cudaError_t error = core_->allocate(&ptr, bytes, stream);
  if (error == cudaSuccess) return ptr;
  char head[160];
  std::snprintf(head, sizeof head, "sova: allocating %zu bytes on stream %p failed (%s): ", bytes,
                static_cast<void*>(stream), cudaGetErrorName(error));
  std::string message = head + core_->describe();
  if (error == cudaErrorMemoryAllocation) throw OutOfMemory(std::move(message), error);
  throw Error(message, error);
}

void Pool::deallocate(void* ptr, cudaStream_t stream) {
  const cudaError_t error = core_->deallocate(ptr, stream);
  if (error == cudaSuccess) return;
  char message[200];
  std::snprintf(message, sizeof message,
                "sova: cannot free %p: not a live block of this pool (foreign or interior pointer, or "
                "double free) (%s)",
                ptr, cudaGetErrorName(error));
  throw Error(message, error);
}

cudaError_t Pool::try_allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  return core_->allocate(ptr, bytes, stream);
}
cudaError_t Pool::try_deallocate(void* ptr, cudaStream_t stream) noexcept {
  return core_->deallocate(ptr, stream);
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
// switches on them (lib/core/raw_enum.hpp says why; issue 17).
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
  // later growth (issue 17).
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
Driver& Pool::driver() const noexcept { return core_->driver(); }
void Pool::check_invariants() const { core_->check_invariants(); }

}  // namespace sova
