// sova — the C++ pool: stream-ordered allocation on a CUDA VMM arena.
//
// Glossary (used throughout the code):
//   granule   the device's VMM allocation granularity (2 MiB on H100/H200).
//   chunk     one physical allocation (cuMemCreate), one or more granules.
//   arena     the pool's one reserved VA range plus which granules are backed.
//   block     a VA range handed to a user (live) or kept for reuse (cached/free).
//   pending   freed on stream S, not yet known complete: reusable at once by
//             later work on S, by other streams only through the reuse rules.
//   reserved  physical memory the pool holds mapped (cudaMemPoolAttrReservedMem*).
//   used      bytes handed out and not yet freed (cudaMemPoolAttrUsedMem*):
//             the requested sizes, as the driver counts them.
//
// Semantics mirror cudaMemPool_t; docs/design.md says where and why sova differs.
#pragma once

#include <sova/driver.hpp>
#include <sova/export.h>
#include <sova/placement.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace sova {

/// How a pool places blocks in its VA range (include/sova/placement.hpp
/// describes each; docs/policies.md compares them).
enum class Policy {
  default_policy,  ///< size classes up to 256 KiB, exact above; small blocks slab-placed, large ones best fit
  size_classes,    ///< four size classes per power of two, slab-placed
  buddy,           ///< power-of-two blocks at buddy positions
  best_fit,        ///< exact sizes, best fit
  custom,          ///< PoolOptions::placement, a user's own PlacementPolicy
};

/// How much driver work physical remapping (PoolOptions::remap) may spend to
/// keep reserved memory near live memory. Remapping's work is chunk moves,
/// waits for the allocating stream and chunks released for a gap, each ~25-60
/// us on the H100; it is paid from a credit that allocations missing the
/// stream cache earn, with a bank of 1024 units for a first pass
/// (docs/design.md, "Growth"; docs/policies.md has both levels measured).
enum class RemapEffort {
  /// Half a unit per miss of a size the stream has freed before (steps that
  /// repeat), a sixteenth per other: reserved within 1.03x of the live peak
  /// on the recorded training traces, a decoder within 1.05x, and random
  /// sizes cost little more time than without remapping.
  balanced,
  /// Two units per miss, and a block's physical chunks a sixteenth of it,
  /// 8 MiB to 16 MiB (max_chunk, if smaller, still applies): small chunks
  /// fit more of the gaps that free memory leaves. Within 1.02x on every recorded trace, a decoder whose KV
  /// cache grows each step included, at 1.3-3x balanced's time per
  /// allocation that misses the stream cache where steps vary and 8x on that
  /// decoder (the fast path costs the same), ~30x on random sizes (for about
  /// half their overhead).
  thorough,
};

struct PoolOptions {
  int device = 0;
  /// Largest amount of physical memory the pool may hold; 0 = no limit but the
  /// device. A value beyond the device's memory (SIZE_MAX included) limits
  /// nothing and sizes the VA as 0 does.
  std::size_t max_size = 0;
  /// cudaMemPoolAttrReleaseThreshold: cached memory above this is returned to the
  /// device when the pool finds it unused (see docs/design.md, "Release").
  std::uint64_t release_threshold = 0;
  bool reuse_follow_event_dependencies = true;   ///< cudaMemPoolReuseFollowEventDependencies
  bool reuse_allow_opportunistic = true;         ///< cudaMemPoolReuseAllowOpportunistic
  bool reuse_allow_internal_dependencies = true; ///< cudaMemPoolReuseAllowInternalDependencies
  /// VA to reserve; 0 = twice the pool's limit (max_size or device memory,
  /// whichever is smaller). Rounded up to the granule; a value whose rounding
  /// would exceed SIZE_MAX is refused at creation (sova::Error,
  /// cudaErrorMemoryAllocation), as is one the driver cannot reserve.
  std::size_t va_reserve = 0;
  Policy policy = Policy::default_policy;
  /// The policy when `policy` is Policy::custom (required then, ignored
  /// otherwise). Shared: one policy object may serve many pools.
  std::shared_ptr<const PlacementPolicy> placement = nullptr;
  /// Physical remapping: before creating physical memory to back a block,
  /// move free physical chunks (whole chunks lying in free memory whose frees
  /// are known complete) under the block's VA. Keeps reserved memory near
  /// live memory when free memory is scattered in pieces; costs about what
  /// creating the chunk would (an unmap, a map and an access call per chunk).
  bool remap = true;
  /// How much work remapping may spend (RemapEffort); ignored without remap.
  RemapEffort remap_effort = RemapEffort::balanced;
  /// Check the stream of each allocation and free (docs/design.md, "Stream
  /// checks"): a stream under graph capture is refused with
  /// cudaErrorStreamCaptureUnsupported, and a handle that a new stream reused
  /// after cudaStreamDestroy is told apart from the destroyed stream, whose
  /// pending frees it must not inherit. Costs one driver call per free and two
  /// per allocation (~18 ns each on the H100's host) on streams other than the
  /// legacy stream. Turn off only where no stream this pool serves is ever
  /// captured, and no stream is destroyed while blocks it freed may be pending.
  bool check_streams = true;
  /// Largest physical chunk the pool creates at once. Larger chunks cost fewer
  /// driver calls to grow (one create/map/set-access round, ~50 us, whatever
  /// the size up to 512 MiB on H100); smaller ones can be released sooner, since
  /// a chunk goes back only when every byte of it is free. 0 = no limit.
  std::size_t max_chunk = std::size_t{32} << 20;
  /// The driver to use; nullptr = process_driver(). Must outlive the pool.
  Driver* driver = nullptr;

  // ---- what the pool's physical memory is (docs/vmm.md) ----------------------
  /// Shareable handle types every chunk is created with, as
  /// cudaMemPoolProps::handleTypes: cudaMemHandleTypePosixFileDescriptor lets
  /// the pool be exported to other processes (sova/ipc.hpp, docs/ipc.md).
  /// A type the device does not support: Error(cudaErrorNotSupported);
  /// cudaMemHandleTypeFabric is refused so for now (docs/ipc.md says why).
  unsigned handle_types = 0;
  /// Request generic compression for every chunk (CU_MEM_ALLOCATION_COMP_GENERIC).
  /// A device without it (DeviceInfo::compression_supported): the pool is
  /// refused, Error(cudaErrorNotSupported). The driver may still hand out
  /// uncompressed memory: Pool::properties(ptr) says what a block got.
  bool compressible = false;
  /// -1: device memory (the default). A NUMA node (0, 1, ...): a host memory
  /// pool, whose physical memory is pinned host memory on that node
  /// (cudaMemLocationTypeHostNuma), readable and writable by `device` and by
  /// the host; DeviceInfo::host_numa_id is the node nearest the device. A
  /// device without host-NUMA VMM: Error(cudaErrorNotSupported).
  int host_numa_node = -1;
};

/// A snapshot of a pool's statistics. The four cudaMemPoolAttr figures keep the
/// driver's meanings; the rest are sova's own counters.
struct PoolStats {
  std::uint64_t reserved_current = 0;  ///< cudaMemPoolAttrReservedMemCurrent
  std::uint64_t reserved_high = 0;     ///< cudaMemPoolAttrReservedMemHigh
  std::uint64_t used_current = 0;      ///< cudaMemPoolAttrUsedMemCurrent
  std::uint64_t used_high = 0;         ///< cudaMemPoolAttrUsedMemHigh (see docs/design.md)
  std::uint64_t live_blocks = 0;       ///< blocks handed out and not freed
  std::uint64_t allocations = 0;       ///< successful allocate calls
  std::uint64_t deallocations = 0;     ///< successful deallocate calls
  std::uint64_t fast_path_hits = 0;    ///< allocations served from the stream's own cache
  std::uint64_t failed_allocations = 0;
  std::uint64_t cached_bytes = 0;      ///< bytes in per-stream caches and the free heap, backed or not
  std::uint64_t cached_small_bytes = 0;///< part of cached_bytes in blocks <= kSmallBlockLimit
  std::uint64_t free_backed_bytes = 0; ///< physical memory under free blocks (heap and caches): reserved - in use
  std::uint64_t largest_free_block = 0;///< largest free block wholly backed: what an allocation gets without growing
  std::uint64_t chunks_mapped = 0;     ///< physical chunks created and mapped, ever
  std::uint64_t chunks_unmapped = 0;   ///< physical chunks unmapped and released, ever
  std::uint64_t chunks_remapped = 0;   ///< free physical chunks moved under new VA (PoolOptions::remap)
  std::uint64_t bytes_remapped = 0;    ///< their bytes: physical memory not created thanks to remapping
  std::uint64_t cross_stream_reuses = 0;  ///< blocks taken from another stream's frees
  std::uint64_t cross_stream_waits = 0;   ///< stream waits inserted (internal dependencies)
  std::uint64_t events_recorded = 0;
  std::uint64_t device_synchronizes = 0;  ///< last-resort syncs before reporting out of memory
  /// Host waits that remapping made (only beyond the growth budget,
  /// docs/design.md): on the allocating stream, so that its recent frees
  /// complete; and before unmapping the old place of a chunk moved from
  /// under such frees while work may still use it ("Pinned ghosts").
  std::uint64_t remap_waits = 0;

  /// Allocations the fast path did not serve (allocations - fast_path_hits),
  /// by the step of the slow path that served them (docs/design.md, "The
  /// slow path"), so that a user can see why a workload is slow:
  std::uint64_t slow_from_heap = 0;        ///< best fit in free memory after this stream's cache moved to the heap
  std::uint64_t slow_from_heap_all = 0;    ///< ... only after its kept small blocks moved too
  std::uint64_t slow_from_other_streams = 0;  ///< other streams' frees known complete
  std::uint64_t slow_with_wait = 0;        ///< another stream's frees, with a wait on its fence
  std::uint64_t slow_grown = 0;            ///< growth: physical memory created or remapped under the block
  std::uint64_t slow_after_synchronize = 0;///< after a device synchronize (the last step before out of memory)
  /// Host time spent in slow-path allocations, by the same steps, in
  /// nanoseconds: measured on one slow-path allocation in 8 per thread and
  /// scaled by 8 (a clock read costs ~36-50 ns on the H100's host),
  /// so an estimate; the lock wait is included.
  std::uint64_t slow_from_heap_ns = 0;
  std::uint64_t slow_from_heap_all_ns = 0;
  std::uint64_t slow_from_other_streams_ns = 0;
  std::uint64_t slow_with_wait_ns = 0;
  std::uint64_t slow_grown_ns = 0;
  std::uint64_t slow_after_synchronize_ns = 0;
  /// Part of chunks_remapped: moves back to a place the chunk had left and
  /// was still mapped at (a ghost mapping, docs/design.md): no driver call.
  std::uint64_t remaps_to_ghosts = 0;
  std::uint64_t ghost_mappings = 0;  ///< chunks' old mappings kept now (physical memory counted once)
  /// Stream states the pool holds: one per stream it has seen, and the states
  /// of destroyed streams whose handles were reused (retired). A stream the
  /// program destroys stays counted; its blocks come back to the other streams.
  std::uint64_t stream_states = 0;
  std::uint64_t retired_streams = 0;  ///< of them, retired: their stream is known gone
  /// Streams that allocated or freed in the last ~200 ms, as the pool's
  /// release worker last counted them (every 20 ms), plus streams made since:
  /// what decides whether its streams share it.
  std::uint64_t active_streams = 0;
  /// Bytes cached by the states of retired or inactive streams (never the
  /// legacy stream's): no fence of theirs will come, so other streams get
  /// them back with the release worker's synchronize (~0.2-1.2 s after the
  /// streams stopped) or, where their frees are known complete, at a miss.
  /// The growth budget (PoolOptions::remap) leaves them out. A hint, as
  /// active_streams is.
  std::uint64_t stranded_bytes = 0;

  /// Peak reserved / peak used: the memory overhead of the pool since the
  /// high-water marks were last reset (1.0 = none; 0 when nothing was used).
  double peak_overhead() const noexcept {
    return used_high == 0 ? 0.0 : static_cast<double>(reserved_high) / static_cast<double>(used_high);
  }
};

/// Thrown by Pool::allocate when memory cannot be had. The message carries the
/// request and the pool's statistics.
class SOVA_API OutOfMemory : public std::bad_alloc {
 public:
  OutOfMemory(std::string message, cudaError_t error) : message_(std::move(message)), error_(error) {}
  const char* what() const noexcept override { return message_.c_str(); }
  cudaError_t error() const noexcept { return error_; }

 private:
  std::string message_;
  cudaError_t error_;
};

/// Thrown for misuse (foreign pointer, double free, bad attribute) and for
/// driver failures other than running out of memory.
class SOVA_API Error : public std::runtime_error {
 public:
  Error(const std::string& message, cudaError_t error) : std::runtime_error(message), error_(error) {}
  cudaError_t error() const noexcept { return error_; }

 private:
  cudaError_t error_;
};

namespace detail { class PoolCore; }

class SOVA_API Pool {
 public:
  /// Reserves the pool's VA range. Throws Error (cudaErrorNotSupported) when
  /// the device lacks VMM, cudaErrorInvalidDevice for a bad ordinal.
  explicit Pool(const PoolOptions& options = PoolOptions{});
  /// Waits for the device's outstanding work, then releases all memory. Blocks
  /// still live become invalid.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// Memory for work ordered after this call on `stream`, aligned to 512 bytes.
  /// bytes == 0 returns nullptr. Throws OutOfMemory; a failure changes nothing.
  /// A stream under graph capture: throws Error (cudaErrorStreamCaptureUnsupported).
  /// Thread-safe. Fast path (a block of this size cached on `stream`): no lock
  /// shared with other streams, no CUDA call.
  void* allocate(std::size_t bytes, cudaStream_t stream);
  /// Frees `ptr` in stream order: later work on `stream` may reuse it at once,
  /// other streams per the reuse rules. nullptr is ignored. Throws Error
  /// (cudaErrorInvalidValue) for a pointer that is not a live block of this pool.
  void deallocate(void* ptr, cudaStream_t stream);

  /// As allocate / deallocate, returning the cudaError_t the runtime would.
  cudaError_t try_allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  cudaError_t try_deallocate(void* ptr, cudaStream_t stream) noexcept;

  /// Tells the pool that all work submitted to `stream` before this call is
  /// complete (the caller synchronized the stream, or saw an event recorded
  /// after that work complete): frees made on `stream` before the call become
  /// reusable by every stream at once, without an event or a wait, and
  /// releasable. This is the dependency sova can follow: it cannot see the
  /// caller's own events (cudaMemPoolReuseFollowEventDependencies). Calling it
  /// while such work still runs is a race, as freeing memory in use would be.
  void stream_synchronized(cudaStream_t stream);

  /// Releases cached physical memory until at most `bytes_to_keep` stay
  /// reserved, never memory under live blocks or frees not known complete.
  void trim_to(std::size_t bytes_to_keep);

  /// cudaMemPoolSetAttribute / GetAttribute semantics and error codes:
  /// ReleaseThreshold, the three Reuse switches (int), Reserved/Used Current
  /// and High (get), Reserved/Used High (set to 0 resets to current).
  cudaError_t set_attribute(cudaMemPoolAttr attr, const void* value) noexcept;
  cudaError_t get_attribute(cudaMemPoolAttr attr, void* value) const noexcept;

  /// Grants or revokes access for other devices, like cudaMemPoolSetAccess.
  /// Flags other than none, read and read-write are cudaErrorInvalidValue,
  /// changing nothing (all descriptors are checked before any is applied).
  cudaError_t set_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept;
  cudaError_t get_access(cudaMemAccessFlags* flags, const cudaMemLocation* location) const noexcept;

  PoolStats stats() const;
  /// True when `ptr` lies in this pool's VA range (live or not).
  bool contains(const void* ptr) const noexcept;
  /// The requested size of a live block, 0 if `ptr` is not one.
  std::size_t block_size(const void* ptr) const noexcept;
  int device() const noexcept;
  Driver& driver() const noexcept;
  /// What the driver reports for the physical memory under `ptr` (a live
  /// block's start): location, handle types, whether it is compressed
  /// (cuMemGetAllocationPropertiesFromHandle). cudaErrorInvalidValue for
  /// anything but a live block of this pool.
  cudaError_t properties(const void* ptr, PhysicalProps* out) const noexcept;
  /// The pool's VA reservation and granularity, and the physical chunks
  /// under [ptr, ptr + bytes) (for views and export: sova/alias.hpp, sova/ipc.hpp).
  struct ChunkView {
    std::size_t offset = 0;  ///< from the pool's VA base
    std::size_t bytes = 0;
    PhysicalHandle handle = 0;
    std::uint64_t serial = 0;  ///< never reused within the pool: tells a moved or new chunk from the old
  };
  /// The chunks backing every granule that [ptr, ptr + bytes) touches, in
  /// address order; cudaErrorInvalidValue unless the range lies in a live
  /// block of this pool. The chunks stay where they are while the block is
  /// live (remapping and release move only chunks wholly in free memory).
  cudaError_t chunks_under(const void* ptr, std::size_t bytes, std::vector<ChunkView>* out) const;
  std::uintptr_t va_base() const noexcept;
  std::size_t va_size() const noexcept;
  std::size_t granularity() const noexcept;

  /// Walks every structure and throws Error describing the first broken
  /// invariant: live blocks do not overlap, every live or cached block is
  /// backed, blocks tile the VA range, free neighbours are coalesced, and the
  /// byte counts agree (used + cached + unbacked = VA). For tests; takes every lock.
  void check_invariants() const;

  detail::PoolCore& core() noexcept { return *core_; }

 private:
  std::unique_ptr<detail::PoolCore> core_;
};

}  // namespace sova
