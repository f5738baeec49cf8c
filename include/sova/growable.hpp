// sova — growable allocations: realloc without a copy.
//
// A GrowableBuffer reserves virtual addresses for its largest size once and
// maps physical memory under them as it grows, and unmaps it as it shrinks:
// data() never changes, growing never copies, and the physical memory held
// is the size rounded up to the granularity (2 MiB on the H100), where
// cudaMalloc + copy + free holds old and new at once and a doubling vector up
// to twice its size (bench/growable/, docs/vmm.md). The CUDA programming
// guide's "efficient reallocation" with the VMM API, as a type.
#pragma once

#include <sova/driver.hpp>
#include <sova/error.hpp>
#include <sova/export.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace sova {

struct GrowableOptions {
  int device = 0;
  /// Largest physical chunk one growth creates. A chunk goes back only whole,
  /// once the buffer shrinks below its start, so smaller chunks let shrinking
  /// release more; each chunk costs one create/map/set-access round (~50 us
  /// on the H100). 0 = one chunk per growth step.
  std::size_t max_chunk = std::size_t{256} << 20;
  bool compressible = false;  ///< as PoolOptions::compressible
  int host_numa_node = -1;    ///< as PoolOptions::host_numa_node: pinned host memory on that node
  Driver* driver = nullptr;   ///< nullptr = process_driver(); must outlive the buffer
};

namespace detail {
class Arena;
}

/// Not thread-safe (as std::vector): one thread resizes at a time, and the
/// caller orders resizes with the device work that uses the buffer.
class SOVA_API GrowableBuffer {
 public:
  /// Reserves `max_size` bytes (rounded up to the granularity) of VA; no
  /// physical memory yet. Throws sova::Error: cudaErrorInvalidValue for
  /// max_size 0, cudaErrorNotSupported for a device without VMM (or without
  /// the compression / host memory asked for), cudaErrorInvalidDevice for a
  /// bad ordinal, cudaErrorMemoryAllocation when the VA cannot be had.
  explicit GrowableBuffer(std::size_t max_size, const GrowableOptions& options = GrowableOptions{});
  /// Synchronizes the device, then unmaps and releases everything.
  ~GrowableBuffer();
  GrowableBuffer(const GrowableBuffer&) = delete;
  GrowableBuffer& operator=(const GrowableBuffer&) = delete;

  /// The buffer's address: the same for its whole life.
  void* data() const noexcept;
  /// Bytes asked for by the last successful resize (0 at first).
  std::size_t size() const noexcept { return size_; }
  /// Physical memory mapped now: size() rounded up to the granularity, or
  /// more after a shrink that ends inside a chunk, or one whose unmap of a
  /// chunk the driver refused (that chunk stays mapped, counted here, and is
  /// released by a later shrink or the destructor).
  std::size_t physical_bytes() const noexcept;
  std::size_t max_size() const noexcept;
  std::size_t granularity() const noexcept;

  /// Makes the first `bytes` usable. Growing maps new physical memory after
  /// what is mapped (bytes already there keep their contents); the new
  /// memory may be used by work submitted after this call on any stream.
  /// Shrinking synchronizes `stream` (work on it may still touch the tail;
  /// work on other streams that does is the caller's to finish first) and
  /// releases the chunks wholly beyond `bytes`.
  /// Errors change nothing: bytes > max_size(): cudaErrorInvalidValue; too
  /// little device memory: cudaErrorMemoryAllocation; else the driver's. A
  /// shrink succeeds even when the driver refuses to unmap a chunk beyond
  /// `bytes` (see physical_bytes()), as a pool's trim does.
  cudaError_t resize(std::size_t bytes, cudaStream_t stream) noexcept;

 private:
  std::unique_ptr<detail::Arena> arena_;
  Driver* driver_;
  int device_;
  std::size_t size_ = 0;
  std::size_t max_size_;
};

}  // namespace sova
