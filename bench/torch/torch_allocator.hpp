// sova_bench_torch — PyTorch's CUDA caching allocator (c10) as a peer, called
// from C++ the way PyTorch's own code calls it:
// c10::cuda::CUDACachingAllocator's raw_alloc_with_stream / raw_delete.
//
// Same shape as the allocators in ../allocators.hpp, so the shared workloads
// (pair.hpp, multistream.hpp, random_allocs.hpp) run on it unchanged. No
// PyTorch header here: torch_allocator.cpp is the only file that includes c10.
//
// Two modes of the one process-wide allocator: torch_caching (the default,
// segments from cudaMalloc) and torch_expandable (expandable_segments:True,
// segments that grow by mapping with the VMM API, like sova). A case switches
// the mode when it starts: device synchronize, emptyCache, then the allocator
// settings (c10's setAllocatorSettings, as torch.cuda.memory's
// _set_allocator_settings does), checked by reading the setting back. What
// the allocator cached in the other mode is released first, so a case never
// reuses the other mode's segments.
#pragma once

#include "../allocators.hpp"  // PeakFigures

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace sova_bench {

class TorchAllocator {
 public:
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;

  /// raw_alloc_with_stream; throws (c10::Error, a std::exception) when out of memory.
  void* allocate(std::size_t bytes, cudaStream_t stream);
  /// raw_delete: the block is reusable at once by later work on the stream it
  /// was allocated on (no record_stream here, so no events).
  void deallocate(void* ptr, cudaStream_t stream);
  /// Device synchronize, emptyCache, resetPeakStats(0).
  void reset_peaks();
  /// getDeviceStats(0): reserved_bytes and requested_bytes peaks (aggregate pool).
  PeakFigures read_peaks();

 protected:
  explicit TorchAllocator(bool expandable);
};

/// The default caching allocator: segments from cudaMalloc.
struct TorchCaching : TorchAllocator {
  static constexpr const char* kName = "torch_caching";
  TorchCaching() : TorchAllocator(false) {}
};

/// expandable_segments:True.
struct TorchExpandable : TorchAllocator {
  static constexpr const char* kName = "torch_expandable";
  TorchExpandable() : TorchAllocator(true) {}
};

/// The allocator backend's name ("native", or "cudaMallocAsync" when
/// PYTORCH_CUDA_ALLOC_CONF chose that backend), or why it cannot be had.
std::string torch_allocator_name();

}  // namespace sova_bench
