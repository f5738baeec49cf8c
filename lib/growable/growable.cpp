// GrowableBuffer: one Arena (lib/arena) with no cap but its VA, committed
// from offset 0 up to the size and released from the top down.
#include <sova/error.hpp>
#include <sova/growable.hpp>

#include "arena/arena.hpp"
#include "arena/physical_options.hpp"

#include <string>

namespace sova {

namespace {

Driver& driver_of(const GrowableOptions& o) { return o.driver != nullptr ? *o.driver : process_driver(); }

DeviceInfo device_info_of(Driver& driver, int device) {
  int count = 0;
  if (const cudaError_t err = driver.device_count(&count); err != cudaSuccess) {
    throw Error(std::string("sova: no usable device: ") + cudaGetErrorName(err), err);
  }
  if (device < 0 || device >= count) {
    throw Error("sova: device " + std::to_string(device) + " does not exist (" + std::to_string(count) +
                    (count == 1 ? " device)" : " devices)"),
                cudaErrorInvalidDevice);
  }
  DeviceInfo info;
  if (const cudaError_t err = driver.device_info(device, &info); err != cudaSuccess) {
    throw Error(std::string("sova: querying device failed: ") + cudaGetErrorName(err), err);
  }
  if (!info.vmm_supported) {
    throw Error(std::string("sova: device ") + info.name + " does not support virtual memory management",
                cudaErrorNotSupported);
  }
  return info;
}

detail::PhysicalOptions physical_options_of(const GrowableOptions& o) {
  detail::PhysicalOptions p;
  p.device = o.device;
  p.compressible = o.compressible;
  p.host_numa_node = o.host_numa_node;
  return p;
}

}  // namespace

GrowableBuffer::GrowableBuffer(std::size_t max_size, const GrowableOptions& options)
    : driver_(&driver_of(options)), device_(options.device), max_size_(max_size) {
  if (max_size == 0) throw Error("sova: a growable buffer needs a maximum size above 0", cudaErrorInvalidValue);
  const detail::PhysicalOptions physical = physical_options_of(options);
  const DeviceInfo info = detail::for_physical_options(*driver_, device_info_of(*driver_, device_), physical);
  const PhysicalProps props = detail::physical_props_for(physical, info);
  // The VA cannot be had (its rounding to the granule would overflow), as
  // for a pool's va_reserve: cudaErrorMemoryAllocation.
  if (max_size > SIZE_MAX - info.granularity) throw Error("sova: maximum size too large", cudaErrorMemoryAllocation);
  // max_chunk 0 in the arena = a whole run in one chunk, which is what a
  // growth step is.
  arena_ = std::make_unique<detail::Arena>(*driver_, device_, info.granularity, max_size, 0, options.max_chunk, props);
}

GrowableBuffer::~GrowableBuffer() {
  driver_->device_synchronize(device_);  // work may still use the memory
}

void* GrowableBuffer::data() const noexcept { return reinterpret_cast<void*>(arena_->base()); }
std::size_t GrowableBuffer::physical_bytes() const noexcept { return arena_->backed_bytes(); }
std::size_t GrowableBuffer::max_size() const noexcept { return max_size_; }
std::size_t GrowableBuffer::granularity() const noexcept { return arena_->granularity(); }

cudaError_t GrowableBuffer::resize(std::size_t bytes, cudaStream_t stream) noexcept {
  if (bytes > max_size_) return cudaErrorInvalidValue;
  const std::size_t g = arena_->granularity();
  const std::size_t mapped_end = (bytes + g - 1) / g * g;  // granules the new size touches
  if (bytes > size_) {
    // Backs every unbacked granule below the new end; a failure undoes
    // itself (Arena::commit), so size_ and the mapping stay as they were.
    if (const cudaError_t err = arena_->commit(0, mapped_end); err != cudaSuccess) return err;
  } else if (bytes < size_) {
    const std::size_t top = arena_->size();
    if (mapped_end < top && arena_->backed_bytes_in(mapped_end, top - mapped_end) != 0) {
      if (const cudaError_t err = driver_->stream_synchronize(stream); err != cudaSuccess) return err;
      arena_->release_within(mapped_end, top - mapped_end);
    }
  }
  size_ = bytes;
  return cudaSuccess;
}

}  // namespace sova
