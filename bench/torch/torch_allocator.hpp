// sova_bench_torch — PyTorch's CUDA caching allocator (c10) as a peer, called
// from C++ the way PyTorch's own code calls it:
// c10::cuda::CUDACachingAllocator's raw_alloc_with_stream / raw_delete.
//
// Same shape as the allocators in ../allocators.hpp, so the shared workloads
// (pair.hpp, multistream.hpp, random_allocs.hpp) run on it unchanged. No
// PyTorch header here: torch_allocator.cpp is the only file that includes c10.
//
// One mode per process, for its whole life: torch_caching (segments from
// cudaMalloc) or, with `sova_bench_torch --expandable`, torch_expandable
// (expandable_segments:True: segments that grow by mapping with the VMM API,
// like sova). PyTorch takes the setting from PYTORCH_CUDA_ALLOC_CONF (or
// PYTORCH_ALLOC_CONF) when it loads; main.cpp sets it, re-executing the
// program if need be. Before the first case the program checks what the
// allocator really does (a probe allocation, then its snapshot's
// is_expandable); a case whose mode the allocator does not run skips and
// says why. (Switching at run time with setAllocatorSettings is not used:
// segments made in one mode and released in the other, and a read-back
// through CUDAAllocatorConfig::expandable_segments(), an inline function that
// is false outside PyTorch's own build, made it unreliable.)
//
// Streams: an expandable segment belongs to the stream it was made for, and
// releasing it (emptyCache) synchronizes that stream; the workloads destroy
// their streams at the end of each case. So the program wraps
// cudaStreamDestroy (linker --wrap, bench/torch/meson.build): before a
// stream is destroyed, it is synchronized and the allocator's cache emptied,
// so that the allocator holds nothing on a stream that no longer exists. Every
// case therefore starts with an empty torch cache (its warm-up fills it).
#pragma once

#include "../allocators.hpp"  // PeakFigures
#include "../replay/memory_now.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace sova_bench {

/// Sets this process's mode; main() calls it once, before any case runs.
void set_torch_expandable(bool expandable);
/// The mode set_torch_expandable chose.
bool torch_expandable();

/// Empty when PyTorch's allocator runs in this process's mode; otherwise why
/// not (the allocator cannot be had, another backend, or the probe allocation
/// found segments of the other kind). Needs a GPU; found once, then cached.
const std::string& torch_mode_error();

/// What the probe saw: "true" or "false" (expandable segments), or
/// "unknown: <why>".
std::string torch_expandable_seen();

/// The first error met when emptying the cache before a stream was destroyed
/// (see above), or empty.
std::string torch_release_error();

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

/// expandable_segments:True (a process run with --expandable).
struct TorchExpandable : TorchAllocator {
  static constexpr const char* kName = "torch_expandable";
  TorchExpandable() : TorchAllocator(true) {}
};

/// getDeviceStats(0): reserved_bytes and requested_bytes now (aggregate
/// pool), for the trace replay's memory over time (replay/memory_now.hpp).
MemoryNow memory_now(TorchAllocator& a);

/// The allocator backend's name ("native", or "cudaMallocAsync" when
/// PYTORCH_CUDA_ALLOC_CONF chose that backend), or why it cannot be had.
std::string torch_allocator_name();

}  // namespace sova_bench
