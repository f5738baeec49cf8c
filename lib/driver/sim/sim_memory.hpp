// sova sim — simulated device memory: VA reservations, physical chunks,
// mappings, access and per-device accounting.
//
// Model (one host address space stands in for every device's VA space, as
// CUDA's unified VA does):
//  * reservation: mmap(PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE),
//    over-reserved and trimmed to honour the alignment.
//  * chunk: a memfd of the chunk's size (sparse: host RAM is used only when
//    touched), counted against SimConfig::total_memory of its device.
//  * mapping: mmap(MAP_FIXED|MAP_SHARED, chunk fd, PROT_NONE) over the
//    reservation, so two mappings of one chunk share their bytes, as on a GPU.
//  * access: mprotect to the most permissive access any device was granted
//    (the host plays every device); memory is PROT_NONE until set_access.
//  * unmap puts back the PROT_NONE anonymous reservation.
// Touching reserved-but-unmapped memory or mapped memory without access thus
// faults (SIGSEGV) as a GPU kernel would.
//
// Errors follow the CUDA driver's cuMem* calls as the runtime reports them:
// cudaErrorInvalidValue for a bad range, size, handle or overlap;
// cudaErrorInvalidDevice for a bad ordinal; cudaErrorMemoryAllocation when a
// device's memory or the host's VA is exhausted. A failed call changes nothing.
//
// Thread safety: every public method takes one mutex. None is hot (the pool
// calls the driver only when it grows or shrinks), and one lock keeps the
// overlap checks and the mmap calls that act on them atomic.
#pragma once

#include <sova/driver.hpp>
#include <sova/sim.hpp>

#include "sim_failures.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace sova::sim {

class SimMemory {
 public:
  SimMemory(int device_count, std::size_t total_memory, std::size_t granularity);
  /// Also what the device supports (handle types, compression, host nodes).
  explicit SimMemory(const SimConfig& config);
  /// Unmaps everything still mapped, frees every reservation, closes every
  /// chunk. The caller guarantees no stream work touches the memory any more.
  ~SimMemory();
  SimMemory(const SimMemory&) = delete;
  SimMemory& operator=(const SimMemory&) = delete;

  cudaError_t reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va);
  /// (va, bytes) must be exactly one live reservation with nothing mapped in it.
  cudaError_t free(std::uintptr_t va, std::size_t bytes);

  cudaError_t create(int device, std::size_t bytes, PhysicalHandle* out);
  // ---- sim_memory_props.cpp: properties, host memory, POSIX handles ----
  /// A memfd named after `props` (so that an importer in another process
  /// learns them); host-NUMA chunks count against their node's host_memory.
  cudaError_t create_with(const PhysicalProps& props, std::size_t bytes, PhysicalHandle* out);
  cudaError_t properties_at(std::uintptr_t va, PhysicalProps* out);
  cudaError_t export_fd(PhysicalHandle handle, int* fd);
  cudaError_t import_fd(int fd, PhysicalHandle* out);
  /// Frees the accounting and the handle at once; mappings keep the bytes
  /// alive (the mmap holds the file) until they are unmapped, as in CUDA.
  cudaError_t release(PhysicalHandle handle);

  /// va granule-aligned, bytes == the chunk's size, [va, va+bytes) inside one
  /// live reservation and overlapping no mapping.
  cudaError_t map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle);
  /// (va, bytes) must be exactly one earlier map() range.
  cudaError_t unmap(std::uintptr_t va, std::size_t bytes);
  /// [va, va+bytes) must be covered by whole, contiguous mappings (CUDA: "a
  /// fully mapped address range containing all allocations"); a range that
  /// cuts a mapping is cudaErrorInvalidValue.
  cudaError_t set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs, std::size_t count);

  cudaError_t info(int device, std::size_t* free_bytes, std::size_t* total_bytes);
  /// The access `device` has to the mapping holding `va` (cuMemGetAccess).
  /// cudaErrorInvalidValue where nothing is mapped; cudaErrorInvalidDevice.
  cudaError_t access_at(std::uintptr_t va, int device, cudaMemAccessFlags* out);

  // ---- sim_memory_touch.cpp: what modelled device work touches ----
  /// Copies `bytes` from `src` to `dst` as a device copy does, under the
  /// lock, so that no map or unmap comes between the check and the bytes:
  /// false (nothing copied, `why` says what is wrong) when a side lying in
  /// reserved VA is not wholly mapped with the access it needs (read for
  /// `src`, write for `dst`). Memory outside every reservation is the
  /// host's (a backup's slabs): not checked.
  bool copy(void* dst, const void* src, std::size_t bytes, std::string* why);
  /// Runs `work` under the lock when [ptr, ptr + bytes) may be read (and
  /// written, with `write`) by the device; false (`work` not run, `why` set)
  /// otherwise. `work` must not call the driver.
  bool touch(const void* ptr, std::size_t bytes, bool write, const std::function<void()>& work, std::string* why);

  void fail_create_at(int n, cudaError_t error);
  void fail_map_at(int n, cudaError_t error);
  void fail_set_access_at(int n, cudaError_t error);
  void fail_unmap_at(int n, cudaError_t error);

  /// Fills the memory fields of `out` (the others are left alone).
  void fill_counters(SimCounters* out) const;

 private:
  struct Chunk {
    int fd = -1;
    std::size_t bytes = 0;
    int device = 0;
    PhysicalProps props{};  // as granted (compression only where supported)
    bool imported = false;  // from import_fd: counts against no device
  };
  struct Mapping {
    std::size_t bytes = 0;
    PhysicalHandle handle = 0;               // may be released meanwhile
    std::vector<cudaMemAccessFlags> access;  // per device, then the host node; ProtNone at first
    PhysicalProps props{};                   // the chunk's, kept past its release
  };
  /// Accounting of a chunk: its device's or its host node's counter.
  std::size_t& used_of(const Chunk& chunk) noexcept {
    return chunk.props.location.type == cudaMemLocationTypeHostNuma
               ? host_used_[static_cast<std::size_t>(chunk.props.location.id)]
               : used_[static_cast<std::size_t>(chunk.device)];
  }

  bool valid_device(int device) const noexcept { return device >= 0 && device < device_count_; }
  bool aligned(std::uintptr_t v) const noexcept { return v % granularity_ == 0; }
  // Whether [va, va+bytes) lies inside one live reservation.
  bool reserved(std::uintptr_t va, std::size_t bytes) const;
  // Whether device work may touch [va, va + bytes) (see copy); `why` set when not. Under mu_.
  bool touchable(std::uintptr_t va, std::size_t bytes, bool write, std::string* why) const;
  // Whether any mapping intersects [va, va+bytes).
  bool any_mapped(std::uintptr_t va, std::size_t bytes) const;

  const int device_count_;
  const std::size_t total_memory_;
  const std::size_t granularity_;

  mutable std::mutex mu_;
  bool descriptor_limit_reported_ = false;              ///< guarded by mu_: said once on stderr
  std::map<std::uintptr_t, std::size_t> reservations_;  // va -> bytes
  std::map<std::uintptr_t, Mapping> mappings_;          // va -> mapping
  std::unordered_map<PhysicalHandle, Chunk> chunks_;    // live handles
  std::vector<std::size_t> used_;                       // per device
  // What the simulated devices support (defaults: SimConfig's).
  bool posix_fd_ = true, fabric_ = false, compression_ = false;
  std::size_t host_memory_ = 0;
  std::vector<std::size_t> host_used_;  // per host NUMA node
  PhysicalHandle next_handle_ = 1;      // never reused, never 0
  FailPoint fail_create_, fail_map_, fail_set_access_, fail_unmap_;
  SimCounters counts_;  // memory fields only
};

}  // namespace sova::sim
