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

// The vocabulary has a header per concept, each usable alone; this one
// includes them all, so that including it is enough for any user of a pool:
#include <sova/driver.hpp>  // Driver, PhysicalProps
#include <sova/error.hpp>   // Error, OutOfMemory
#include <sova/export.h>
#include <sova/graphs.hpp>   // GraphMemoryStats
#include <sova/options.hpp>  // PoolOptions, Policy, RemapEffort
#include <sova/sleep.hpp>    // SleepMode
#include <sova/stats.hpp>    // PoolStats
#include <sova/views.hpp>    // ChunkView

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sova {

namespace detail {
class PoolCore;
}

class SOVA_API Pool {
 public:
  /// Reserves the pool's VA range. Throws Error (cudaErrorNotSupported) when
  /// the device lacks VMM, cudaErrorInvalidDevice for a bad ordinal.
  explicit Pool(const PoolOptions& options = PoolOptions{});
  /// Waits for the device's outstanding work on the pool's memory, then
  /// releases all memory: for the fences of its pending frees where every
  /// one has a fence and no block is live (event waits: a capture running
  /// elsewhere survives), else for the devices. A device synchronize refused
  /// while a capture runs leaves the memory mapped to the process's end
  /// rather than unmap it under queued work (docs/graphs.md, "Captures sova
  /// does not know"). Blocks still live become invalid.
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  /// Memory for work ordered after this call on `stream`, aligned to 512 bytes.
  /// bytes == 0 returns nullptr. Throws OutOfMemory; a failure changes nothing.
  /// On a stream under graph capture: graph memory, held by the graph being
  /// captured until it, its executables and launches are gone (docs/graphs.md).
  /// Thread-safe. Fast path (a block of this size cached on `stream`): no lock
  /// shared with other streams; the CUDA calls are the stream checks
  /// (PoolOptions::check_streams: is `stream` capturing, which stream its
  /// handle names now) and, where another stream asked this one for a fence,
  /// one event record (docs/design.md, "Driver calls per pair").
  void* allocate(std::size_t bytes, cudaStream_t stream);
  /// Frees `ptr` in stream order: later work on `stream` may reuse it at once,
  /// other streams per the reuse rules. nullptr is ignored. Throws Error
  /// (cudaErrorInvalidValue) for a pointer that is not a live block of this pool.
  /// Fast path (the block goes to `stream`'s cache): the CUDA calls are the
  /// stream check (is `stream` capturing) and, where a fence is due, one event
  /// record: for a free of a granule or more, each one in a pool that gives
  /// idle memory back (a release threshold below UINT64_MAX, the default 0
  /// included) and at most one a millisecond in a caching pool; for frees of
  /// other streams' blocks, the first and every 16th; for a fence asked for.
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

  /// What CUDA graphs captured with this pool hold of it (docs/graphs.md).
  /// The memory of graphs released since the last call is returned first.
  GraphMemoryStats graph_memory_stats() const;
  /// What each graph holds, by capture id: which graph holds what of
  /// graph_memory_stats()'s bytes (docs/graphs.md, "Which graph holds what").
  GraphMemorySnapshot graph_memory_snapshot() const;
  /// GraphMemoryStats::held_bytes_high = held_bytes now.
  void reset_graph_memory_high() noexcept;
  /// cudaDeviceGraphMemTrim's counterpart: returns the memory of released
  /// graphs to the pool, then releases free physical memory above the
  /// release threshold (trim_to). Memory graphs still hold stays.
  void trim_graph_memory();
  /// Share groups (docs/graphs.md, "Graphs that never run at once"): graphs
  /// the program promises never run at once — no launch of one while a
  /// launch of another may run, on any stream — share the memory their
  /// captures free. A new group of this pool in `*group` (ids from 1, never
  /// reused). cudaErrorInvalidValue for nullptr; cudaErrorMemoryAllocation
  /// when host memory lacks.
  cudaError_t create_graph_share_group(std::uint64_t* group) noexcept;
  /// No capture joins `group` any more; its memory goes back to the pool
  /// once its last member graph is released. cudaErrorInvalidValue, changing
  /// nothing, for an id that names no group of this pool not yet destroyed.
  cudaError_t destroy_graph_share_group(std::uint64_t group) noexcept;
  /// The next capture whose first allocation from this pool is on `stream`
  /// joins `group` (0: none, cancelling an earlier call for `stream`); one
  /// capture per call. cudaErrorInvalidValue, changing nothing, for a group
  /// not open or the legacy stream.
  cudaError_t capture_into_share_group(cudaStream_t stream, std::uint64_t group) noexcept;
  /// destroy_graph_share_group() for every group of the pool not yet
  /// destroyed (what sovaMemPoolDestroy does, since the groups' ids cannot
  /// be named through a destroyed handle).
  void destroy_graph_share_groups() noexcept;
  /// True when `ptr` lies in this pool's VA range (live or not).
  bool contains(const void* ptr) const noexcept;
  /// The requested size of a live block, 0 if `ptr` is not one.
  std::size_t block_size(const void* ptr) const noexcept;
  /// What `ptr` is to this pool, in words, for error messages: "a live block
  /// of this pool", "inside a block allocated at 0x... (N bytes); free its
  /// start", "already freed", "not allocated by this pool", ... Takes the
  /// pool's heap lock and may walk every block: not for hot paths.
  std::string describe_pointer(const void* ptr) const;
  /// Why an allocation of `bytes` that returned `error` failed, in words,
  /// and what to do: a stream value that names no stream, a pool asleep, a
  /// request beyond what the pool may ever hold (its max size or the
  /// device's memory), or out of memory now — with the pool's figures
  /// (reserved, used, cached, its limit). The part after the call and code
  /// in allocate's exceptions and the C API's last error message. Takes the
  /// heap lock: not for hot paths.
  std::string describe_allocation_failure(std::size_t bytes, cudaError_t error) const;
  int device() const noexcept;
  /// The device this pool found `stream` on when it last had reason to ask
  /// (the stream's first use here, or its handle found reused by a new
  /// stream, at an allocation outside capture); -1 where it has not asked (a
  /// first use under capture, or check_streams off on a system of several
  /// devices). No driver call: what the C API's cudaMallocAsync routing checks
  /// its own cache against (docs/multi-gpu.md, "Which device a stream is on").
  int stream_device(cudaStream_t stream) noexcept;
  Driver& driver() const noexcept;
  /// What the driver reports for the physical memory under `ptr` (a live
  /// block's start): location, handle types, whether it is compressed
  /// (cuMemGetAllocationPropertiesFromHandle). cudaErrorInvalidValue for
  /// anything but a live block of this pool.
  cudaError_t properties(const void* ptr, PhysicalProps* out) const noexcept;
  /// The pool's VA reservation and granularity, and the physical chunks
  /// under [ptr, ptr + bytes) (for views and export: sova/alias.hpp, sova/ipc.hpp).
  using ChunkView = sova::ChunkView;
  /// The chunks backing every granule that [ptr, ptr + bytes) touches, in
  /// address order; cudaErrorInvalidValue unless the range lies in a live
  /// block of this pool. The chunks stay where they are while the block is
  /// live (remapping and release move only chunks wholly in free memory).
  cudaError_t chunks_under(const void* ptr, std::size_t bytes, std::vector<ChunkView>* out) const;
  std::uintptr_t va_base() const noexcept;
  std::size_t va_size() const noexcept;
  std::size_t granularity() const noexcept;
  /// What the pool asks of every physical chunk it creates: the location
  /// (device or host NUMA node), the shareable handle types
  /// (PoolOptions::handle_types) and the compression request. properties(ptr)
  /// says what a block's memory got.
  const PhysicalProps& chunk_props() const noexcept;

  /// Sleep and wake (docs/sleep-wake.md): gives the pool's physical memory
  /// back to the device and makes it anew under the same addresses.
  /// sleep: after the work ordered before it on `stream` (an event, no
  /// device synchronize), live blocks' bytes are copied to pinned host memory
  /// (SleepMode::backup; kept across cycles, release_sleep_host_memory frees
  /// it) or dropped (discard; discard_zeroed: wake zeroes the blocks still
  /// live, and a driver without memset_async refuses it with
  /// cudaErrorNotSupported, nothing changed); then every chunk is unmapped
  /// and released.
  /// From its start the pool refuses allocations (cudaErrorNotPermitted)
  /// until wake; a free while asleep is accepted and final. Asleep already:
  /// cudaSuccess (finishing a release a failure cut short). A failure leaves
  /// the pool awake as it was, or asleep (asleep() says which), nothing leaked.
  /// A backup that would hold more host memory than
  /// PoolOptions::sleep_host_budget: cudaErrorMemoryAllocation before
  /// anything is copied or released (stats().sleep_budget_refusals counts it).
  /// A slab the pin-ahead thread is pinning is waited for and used.
  /// A `stream` value that names no stream (the driver is asked, whatever
  /// check_streams): cudaErrorInvalidResourceHandle, nothing changed.
  cudaError_t sleep(SleepMode mode, cudaStream_t stream) noexcept;
  /// The memory made and mapped where it was, with the access granted
  /// before (peers too); backed-up contents restored (discard_zeroed: the
  /// live blocks zeroed) on the pool's copy stream, which later work on
  /// `stream` waits for: returns at once. Awake
  /// already: cudaSuccess. A failure (the device full: cudaErrorMemoryAllocation)
  /// leaves the pool asleep, nothing made; so does a `stream` value that
  /// names no stream (cudaErrorInvalidResourceHandle), as for sleep.
  cudaError_t wake(cudaStream_t stream) noexcept;
  bool asleep() const noexcept;
  /// Frees the pinned host memory kept for backups (what pin-ahead pinned
  /// too); cudaErrorNotPermitted while asleep (the backups are in it).
  /// Pin-ahead then pins nothing until a growth leaves the pool reserving
  /// more than it ever had (a growth undone midway included; resetting
  /// reservedHigh does not lower that mark), or reserve_sleep_backup is called.
  cudaError_t release_sleep_host_memory() noexcept;
  /// Pins host memory for backups ahead of time, until the pool holds at
  /// least `bytes` of it, so that a sleep backing up no more than that pins
  /// nothing: the first sleep then runs at the link's speed too (pinning runs
  /// at a few GiB/s). `stats().reserved_current` is always enough. Holds the
  /// pool's growth back while it pins: call it before the work starts. All
  /// or nothing: on failure (cudaErrorMemoryAllocation) the memory held is
  /// as before; beyond PoolOptions::sleep_host_budget, refused the same way
  /// whatever the size (counted in stats().sleep_budget_refusals); 64 TiB or
  /// more without a budget, refused too (more than a pool holds). Asleep or awake; release_sleep_host_memory frees it. PoolOptions::
  /// sleep_pin_ahead does this in the background, without holding growth back.
  cudaError_t reserve_sleep_backup(std::size_t bytes) noexcept;
  /// Where the last backup (SleepMode::backup) holds the bytes at `ptr`, a
  /// device address in the pool: their host address, and in `*bytes_there`
  /// how many of the next `bytes` lie there in one piece (a block's backup
  /// may be split between host slabs: ask again past them). nullptr and 0
  /// where it holds none: no backup yet, the last sleep discarded, no block
  /// live at that sleep there, the host memory given back since, or `ptr`
  /// outside the pool. Kept across wake until the next sleep or
  /// release_sleep_host_memory: after wake it is what the sleep copied, not
  /// what the device holds now. The memory is the pool's: read it, never
  /// write or free it, and not past the next sleep or release.
  const void* sleep_backup_at(const void* ptr, std::size_t bytes, std::size_t* bytes_there) noexcept;
  /// What refused host memory in the last sleep or reserve_sleep_backup that
  /// pinned any (SleepPinRefusal::none where it succeeded): after one of
  /// them failed with cudaErrorMemoryAllocation, which limit to raise. Any
  /// thread; the C API's message says it in words.
  SleepPinRefusal sleep_pin_refusal() const noexcept;

  /// Walks every structure and throws Error describing the first broken
  /// invariant: live blocks do not overlap, every live or cached block is
  /// backed, blocks tile the VA range, free neighbours are coalesced, and the
  /// byte counts agree (used + cached + unbacked = VA). For tests; takes every lock.
  void check_invariants() const;

 private:
  std::unique_ptr<detail::PoolCore> core_;
};

}  // namespace sova
