// sova — what a pool is created with: PoolOptions, the placement Policy and
// the RemapEffort of physical remapping.
#pragma once

#include <sova/driver.hpp>
#include <sova/placement.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

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
  bool reuse_follow_event_dependencies = true;    ///< cudaMemPoolReuseFollowEventDependencies
  bool reuse_allow_opportunistic = true;          ///< cudaMemPoolReuseAllowOpportunistic
  bool reuse_allow_internal_dependencies = true;  ///< cudaMemPoolReuseAllowInternalDependencies
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
  /// checks"): a stream under graph capture is served graph memory
  /// (docs/graphs.md), and a handle that a new stream reused after
  /// cudaStreamDestroy is told apart from the destroyed stream, whose pending
  /// frees it must not inherit. Without the checks an allocation on a
  /// capturing stream is served as an eager one, wrong for a graph. Costs one driver call per free and two
  /// per allocation (~18 ns each on the H100's host) on streams other than the
  /// legacy stream. Turn off only where no stream this pool serves is ever
  /// captured, and no stream is destroyed while blocks it freed may be pending.
  bool check_streams = true;
  /// Largest physical chunk the pool creates at once. Larger chunks cost fewer
  /// driver calls to grow (one create/map/set-access round, whose access grant
  /// costs the same whatever the size: docs/benchmarks.md, "Driver costs");
  /// smaller ones can be released sooner, since
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

  // ---- sleep's pinned host memory (docs/sleep-wake.md, "Pinning ahead") -----
  /// The most pinned host memory the pool holds for sleep's backups; 0 = no
  /// limit. A sleep whose backup would need more (the slabs held plus those
  /// it would pin) is refused before anything is copied or released:
  /// cudaErrorMemoryAllocation, the pool awake as it was,
  /// PoolStats::sleep_budget_refusals counts it. reserve_sleep_backup beyond
  /// it is refused the same way, whatever the size (SIZE_MAX too).
  /// Pin-ahead stays within it.
  std::size_t sleep_host_budget = 0;
  /// Pin ahead: a thread of the pool's own pins backup slabs in the
  /// background as the pool's reserved memory grows, up to
  /// min(sleep_host_budget, the most a successful growth reserved: a growth
  /// undone midway needs no backup), so that the
  /// first sleep finds its host memory pinned (pinning runs at a few GiB/s,
  /// the copies at the link's speed). Never on an allocation's path; never
  /// while the pool is asleep; a failure to pin is not an error (counted in
  /// PoolStats::sleep_pin_ahead_failures; the sleep pins the rest). Off by
  /// default: a pool that never sleeps must not lock host memory.
  bool sleep_pin_ahead = false;
};

}  // namespace sova
