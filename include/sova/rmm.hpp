// sova — a RAPIDS RMM memory resource over a sova pool (header-only).
//
//   #include <sova/rmm.hpp>
//
//   sova::RmmResource mr{sova::PoolOptions{}};   // a new pool, shared by every copy
//   rmm::mr::set_current_device_resource(mr);    // RMM 26.10: takes a copy (any_resource)
//   rmm::device_buffer buffer(bytes, stream);    // now from sova, in stream order
//
// RmmResource satisfies RMM 26.x's memory resource concept, which is CCCL's
// `cuda::mr::resource_with<R, cuda::mr::device_accessible>` (checked below):
// allocate / deallocate on a `cuda::stream_ref`, the synchronous pair
// allocate_sync / deallocate_sync, equality, and the device_accessible
// property. It converts to rmm::device_async_resource_ref and to
// cuda::mr::any_resource<cuda::mr::device_accessible>, so rmm::device_buffer,
// rmm::device_uvector, rmm::mr::set_current_device_resource and RMM's
// adaptors (statistics, logging, limiting, ...) take it.
//
// Contracts (docs/adapters.md has the reasons):
// - Copies share one sova::Pool (a shared_ptr); two resources compare equal
//   when they use the same pool, so memory from one may go back to the other.
// - Alignment: sova's blocks are 512-byte aligned (sova/pool.hpp), so any
//   power of two up to 512 is honoured at no cost (RMM asks for 256,
//   rmm::CUDA_ALLOCATION_ALIGNMENT; CCCL's any_resource defaults to 16).
//   A larger power of two is honoured by allocating bytes + alignment - 512
//   and returning the first aligned address in that block; deallocate, given
//   the same alignment (the concept requires it), finds the block's start
//   again by looking down in 512-byte steps for the live block that holds the
//   pointer (at most alignment / 512 lock-free look-ups), so no table is kept.
//   RMM's own base resources refuse alignments above 256 instead. An
//   alignment that is not a power of two is refused with rmm::bad_alloc,
//   as RMM's resources refuse it, changing nothing.
// - Errors: running out of memory throws rmm::out_of_memory (what cuDF's
//   spilling and RMM's failure_callback_resource_adaptor catch), any other
//   allocation failure (an invalidated capture, a bad device) throws
//   rmm::bad_alloc; both carry sova's message and change nothing. deallocate
//   is noexcept, as RMM's and any_resource's are: a pointer that is not a live
//   block of this pool (foreign, interior, freed twice, or given with another
//   alignment than at allocation) prints what was wrong to stderr and aborts,
//   as glibc's free() does on a double free; the pool is unchanged. `bytes` is
//   not needed to free (the pool knows each block's size) and is not checked.
// - Graph capture: allocate and deallocate on a capturing stream give and
//   take graph memory, as sova's pools do (docs/graphs.md), so RMM's
//   containers can be made and dropped inside a capture. A block allocated
//   before a capture and dropped on its stream during it (a container that
//   goes out of scope there) is a free sova refuses under capture
//   (cudaErrorStreamCaptureUnsupported): the resource keeps it and frees it
//   on that stream at its first call outside the capture, as PyTorch's
//   allocator defers such frees. That stream must still exist then.
// - The synchronous pair works on the legacy default stream: allocate_sync
//   allocates on it and synchronizes it (as RMM's cuda_async resources), so
//   the memory is usable at once by any stream or the host; deallocate_sync
//   frees on it without synchronizing, since its caller promises that no work
//   uses the memory any more (the legacy stream orders the reuse).
// - The pool's device: allocate on streams of that device only, and call the
//   synchronous pair with it current, as with RMM's per-device resources.
// - Process exit: RMM keeps its per-device resources in a static map
//   destroyed during exit, after the CUDA context may be gone. If the last
//   copy of a resource goes then (rmm::process_is_exiting()), the pool is
//   left to the OS instead of being destroyed (a pool's destructor calls
//   the driver), as RMM asks of its resources.
//
// Needs RMM's headers (26.x) and the CCCL they ship, and links librmm (for
// rmm::bad_alloc and rmm::process_is_exiting); sova's own library as usual.
#pragma once

#include <sova/pool.hpp>

#include <rmm/aligned.hpp>
#include <rmm/error.hpp>
#include <rmm/process_is_exiting.hpp>

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace sova {

class RmmResource {
 public:
  /// The alignment of every block of a sova pool (documented in sova/pool.hpp).
  static constexpr std::size_t kPoolAlignment = 512;

  /// A new pool made with `options`, shared by this resource and its copies.
  /// Throws sova::Error as sova::Pool's constructor does.
  explicit RmmResource(const PoolOptions& options = PoolOptions{}) : RmmResource(std::make_shared<Pool>(options)) {}

  /// A resource over an existing pool, which it shares (keeps alive). Throws
  /// std::invalid_argument for a null pool.
  explicit RmmResource(std::shared_ptr<Pool> pool)
      : pool_(pool.get()), keep_(std::make_shared<Keeper>(std::move(pool))) {
    if (pool_ == nullptr) throw std::invalid_argument("sova::RmmResource: the pool is null");
  }

  RmmResource(const RmmResource&) = default;
  RmmResource(RmmResource&&) noexcept = default;
  RmmResource& operator=(const RmmResource&) = default;
  RmmResource& operator=(RmmResource&&) noexcept = default;
  ~RmmResource() = default;

  /// Memory for work ordered after this call on `stream`, aligned to
  /// `alignment` (a power of two). bytes == 0 gives nullptr. Throws
  /// rmm::out_of_memory, or rmm::bad_alloc for any other failure.
  [[nodiscard]] void* allocate(cuda::stream_ref stream, std::size_t bytes,
                               std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) {
    if (!is_power_of_two(alignment)) refuse_alignment(alignment);
    keep_->free_deferred();
    if (alignment <= kPoolAlignment) return allocate_block(bytes, stream.get());
    if (bytes == 0) return nullptr;
    const std::size_t extra = alignment - kPoolAlignment;
    if (bytes > SIZE_MAX - extra) {
      throw rmm::out_of_memory("sova::RmmResource: " + std::to_string(bytes) + " bytes aligned to " +
                               std::to_string(alignment) + " is more than any device holds");
    }
    const auto base = reinterpret_cast<std::uintptr_t>(allocate_block(bytes + extra, stream.get()));
    return reinterpret_cast<void*>((base + alignment - 1) & ~(std::uintptr_t{alignment} - 1));
  }

  /// Frees `ptr` (from allocate with the same `alignment`) in stream order on
  /// `stream`. nullptr is ignored. A pointer that is not a live block of this
  /// pool aborts the process with a message (see the contracts above).
  void deallocate(cuda::stream_ref stream, void* ptr, [[maybe_unused]] std::size_t bytes,
                  std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) noexcept {
    if (ptr == nullptr) return;
    keep_->free_deferred();
    void* const block = alignment <= kPoolAlignment ? ptr : block_start(ptr, alignment);
    const cudaError_t error = pool_->try_deallocate(block, stream.get());
    if (error == cudaErrorStreamCaptureUnsupported) {
      keep_->defer(block, stream.get());  // an eager block dropped during a capture
    } else if (error != cudaSuccess) {
      bad_free(ptr, alignment, error);
    }
  }

  /// allocate on the legacy default stream, then synchronizes that stream:
  /// the memory is usable at once by any stream and by the host.
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) {
    void* ptr = allocate(cuda::stream_ref{cudaStream_t{}}, bytes, alignment);
    if (ptr == nullptr) return ptr;
    const cudaError_t error = pool_->driver().stream_synchronize(cudaStream_t{});
    if (error != cudaSuccess) {
      deallocate(cuda::stream_ref{cudaStream_t{}}, ptr, bytes, alignment);
      throw rmm::bad_alloc(std::string("sova::RmmResource::allocate_sync: synchronizing the default stream failed: ") +
                           cudaGetErrorName(error));
    }
    return ptr;
  }

  /// deallocate on the legacy default stream, without synchronizing: the
  /// caller promises that no work uses the memory any more.
  void deallocate_sync(void* ptr, std::size_t bytes, std::size_t alignment = rmm::CUDA_ALLOCATION_ALIGNMENT) noexcept {
    deallocate(cuda::stream_ref{cudaStream_t{}}, ptr, bytes, alignment);
  }

  /// Equal when both use the same pool: memory from one may be freed by the other.
  [[nodiscard]] bool operator==(const RmmResource& other) const noexcept { return pool_ == other.pool_; }
  [[nodiscard]] bool operator!=(const RmmResource& other) const noexcept { return pool_ != other.pool_; }

  /// The memory is device memory (cuda::mr::device_accessible).
  friend void get_property(const RmmResource&, cuda::mr::device_accessible) noexcept {}

  /// The pool behind this resource (statistics, trim_to, stream_synchronized).
  [[nodiscard]] Pool& pool() const noexcept { return *pool_; }
  [[nodiscard]] const std::shared_ptr<Pool>& shared_pool() const noexcept { return keep_->pool; }

 private:
  // Holds the pool for every copy, and the frees sova refused under capture
  // until they can be made; leaves the pool to the OS when the last copy
  // goes during process exit (RMM's static per-device map), when destroying
  // it would call a driver that may be gone.
  struct Keeper {
    std::shared_ptr<Pool> pool;
    explicit Keeper(std::shared_ptr<Pool> p) noexcept : pool(std::move(p)) {}
    Keeper(const Keeper&) = delete;
    Keeper& operator=(const Keeper&) = delete;
    ~Keeper() {
      if (pool == nullptr) return;
      if (rmm::process_is_exiting()) {
        new std::shared_ptr<Pool>(std::move(pool));  // leaked on purpose
        return;
      }
      free_deferred();  // the last copy: frees still refused now stay the pool's until it goes
    }

    /// Keeps a free of `block` on `stream` refused under capture, for later.
    /// Host memory running out leaves the block to the pool's destruction.
    void defer(void* block, cudaStream_t stream) noexcept {
      std::lock_guard lock(deferred_mutex);
      try {
        deferred.emplace_back(block, stream);
        any_deferred.store(true, std::memory_order_relaxed);
      } catch (const std::bad_alloc&) {
      }
    }
    /// Makes the frees deferred so far where the pool now takes them (their
    /// stream's capture is over). One relaxed load when there are none.
    void free_deferred() noexcept {
      if (!any_deferred.load(std::memory_order_relaxed)) [[likely]] return;
      std::lock_guard lock(deferred_mutex);
      std::size_t kept = 0;
      for (const auto& [block, stream] : deferred) {
        if (pool->try_deallocate(block, stream) == cudaErrorStreamCaptureUnsupported) deferred[kept++] = {block, stream};
      }
      deferred.resize(kept);
      any_deferred.store(kept != 0, std::memory_order_relaxed);
    }

    std::atomic<bool> any_deferred{false};
    std::mutex deferred_mutex;
    std::vector<std::pair<void*, cudaStream_t>> deferred;  // under deferred_mutex
  };

  static constexpr bool is_power_of_two(std::size_t value) noexcept { return value != 0 && (value & (value - 1)) == 0; }

  [[noreturn]] static void refuse_alignment(std::size_t alignment) {
    throw rmm::bad_alloc("sova::RmmResource: alignment " + std::to_string(alignment) + " is not a power of two");
  }

  // The pool's allocate, its exceptions turned into RMM's (same message).
  void* allocate_block(std::size_t bytes, cudaStream_t stream) {
    try {
      return pool_->allocate(bytes, stream);
    } catch (const OutOfMemory& e) {
      throw rmm::out_of_memory(e.what());
    } catch (const Error& e) {
      throw rmm::bad_alloc(e.what());
    }
  }

  // The start of the block that `ptr` (allocated with `alignment` > 512)
  // lies in: the first live block start at or below ptr, in 512-byte steps,
  // at most alignment - 512 bytes below. No other block can start in between:
  // those bytes belong to the live block. `ptr` itself when none is found
  // (the free then fails and reports it).
  void* block_start(void* ptr, std::size_t alignment) const noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    if (address % kPoolAlignment != 0 || !pool_->contains(ptr)) return ptr;
    for (std::size_t back = 0; back < alignment && back <= address; back += kPoolAlignment) {
      const auto* candidate = reinterpret_cast<const void*>(address - back);
      if (!pool_->contains(candidate)) break;
      if (pool_->block_size(candidate) != 0) return const_cast<void*>(candidate);
    }
    return ptr;
  }

  [[noreturn]] static void abort_with(const char* message) noexcept {
    std::fputs(message, stderr);
    std::fflush(stderr);
    std::abort();
  }

  // deallocate is noexcept (as RMM's): a free sova refused, other than
  // under capture (deferred), is a bug in the caller, reported and fatal. During process
  // exit the driver may be gone; errors then are ignored, as RMM does.
  void bad_free(void* ptr, std::size_t alignment, cudaError_t error) const noexcept {
    if (rmm::process_is_exiting()) return;
    char message[320];
    std::snprintf(message, sizeof message, "sova::RmmResource::deallocate(%p, alignment %zu) failed (%s): %s\n", ptr,
                  alignment, cudaGetErrorName(error),
                  error == cudaErrorInvalidValue
                      ? "not a live block of this pool (foreign pointer, double free, or another alignment "
                        "than at allocation)"
                  : error == cudaErrorInvalidResourceHandle
                      ? "the stream names no stream (never created, or destroyed); free on a live stream"
                      : "the pool refused the free (the driver failed)");
    abort_with(message);
  }

  Pool* pool_;                    // the pool of keep_, read on every call
  std::shared_ptr<Keeper> keep_;  // shared by copies
};

static_assert(cuda::mr::synchronous_resource_with<RmmResource, cuda::mr::device_accessible>);
static_assert(cuda::mr::resource_with<RmmResource, cuda::mr::device_accessible>);

}  // namespace sova
