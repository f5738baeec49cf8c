// sova_bench_rmm — RAPIDS RMM's memory resources as peers, behind the shape
// of ../allocators.hpp, so that the shared workloads (pair.hpp, threads.hpp,
// burst.hpp, multistream.hpp, random_allocs.hpp, replay/replay.hpp) run on
// them unchanged. No RMM header here: rmm_allocators.cpp is the only file
// that includes RMM (and the CCCL it brings, newer than the toolkit's).
//
// Each allocator calls its resource directly (static dispatch, no
// any_resource in the timed path): allocate(cuda::stream_ref, bytes, 256) and
// deallocate(cuda::stream_ref, ptr, bytes, 256), the size coming from a
// per-thread table (size_table.hpp says why and what it costs). As with the
// other peers, each resource is made on first use and lives for the whole
// process (warm across cases), except where reset_peaks() replaces it.
//
//   rmm_pool        pool_memory_resource over cuda_memory_resource, initial
//                   size 0, maximum unset: it grows on demand from cudaMalloc
//                   by max(request, current pool size), i.e. doubling, and
//                   never gives memory back until destroyed. (RMM's own
//                   benchmarks start it at half the free memory; from 0 it
//                   starts where sova and cudaMallocAsync start, and its
//                   reserved figure measures its growth policy.)
//   rmm_arena       arena_memory_resource over cuda_memory_resource, RMM's
//                   defaults: the global arena is one cudaMalloc of half the
//                   device's free memory, taken when it is made.
//   rmm_binning     binning_memory_resource over a pool as rmm_pool's, with
//                   the bins of RMM's own benchmarks (random_allocations'
//                   make_binning): fixed-size bins of 256 KiB..4 MiB
//                   (exponents 18..22), each a fixed_size_memory_resource
//                   that takes 128 blocks at a time from the pool (992 MiB
//                   for the five, from the start); a request goes to the
//                   smallest bin it fits, larger ones to the pool itself.
//   rmm_cuda_async  cuda_async_memory_resource: cudaMallocFromPoolAsync on a
//                   pool of its own (cudaMemPoolCreate), release threshold
//                   UINT64_MAX; RMM's wrapper around what cudaMallocAsync_pool
//                   calls directly in sova_bench.
//   sova_rmm        sova::RmmResource (include/sova/rmm.hpp), sova's RMM
//                   adapter, over a pool of its own with sova_bench's
//                   sova_pool settings (release threshold UINT64_MAX,
//                   stream checks on): sova as an RMM user meets it, paying
//                   the same size table as the RMM peers (its deallocate does
//                   not need the size, but a caller passes one).
//
// Peaks (random/ and replay/ read them; reset_peaks/read_peaks as in
// ../allocators.hpp):
//   sova_rmm: its pool's ReservedMemHigh / UsedMemHigh, reset as sova_pool's
//     (trim_to(0), highs set to 0).
//   rmm_pool, rmm_binning: reserved = the pool's pool_size(), all it took from
//     cudaMalloc (bins included); with no maximum the pool never shrinks, so
//     its size is its high-water mark. reset_peaks() synchronizes the device
//     and replaces the resource with a fresh one (the pool's release() is not
//     public): nothing cached (binning: its bins' first 992 MiB, which count
//     in its peak), highs back to that.
//   rmm_cuda_async: its pool's cudaMemPoolAttrReservedMemHigh / UsedMemHigh,
//     reset as for cudaMallocAsync (trim to 0, highs set to 0).
//   rmm_arena: none (so no replay/ cases either). Its reserved memory is the
//     global arena, fixed when it is made (a setting, not a measure of
//     placement), and RMM does not say how much of it is in use.
// used_high is reported where RMM counts it (rmm_cuda_async), else 0: counting
// it for the others would need an adaptor (statistics_resource_adaptor, a
// lock per call) in the timed path; random/ and replay/ report the trace's
// own peak of requested bytes instead (replay/ leaves out res_over_used when
// used_high is 0).
#pragma once

#include "../allocators.hpp"  // PeakFigures

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace sova_bench {

/// "26.10.0": the RMM headers this program was built with.
std::string rmm_version();
/// One line per allocator kind: the resources and their settings, for the
/// JSON context.
std::string rmm_resources();

struct RmmPool {
  static constexpr const char* kName = "rmm_pool";
  std::string why_not;  ///< "no GPU", or why the resource could not be made
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  RmmPool();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  void reset_peaks();
  PeakFigures read_peaks();
};

struct RmmArena {
  static constexpr const char* kName = "rmm_arena";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  RmmArena();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
};

struct RmmBinning {
  static constexpr const char* kName = "rmm_binning";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  RmmBinning();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  void reset_peaks();
  PeakFigures read_peaks();
};

struct RmmCudaAsync {
  static constexpr const char* kName = "rmm_cuda_async";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  RmmCudaAsync();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  void reset_peaks();
  PeakFigures read_peaks();
};

struct SovaRmm {
  static constexpr const char* kName = "sova_rmm";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  SovaRmm();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  void reset_peaks();
  PeakFigures read_peaks();
};

}  // namespace sova_bench
