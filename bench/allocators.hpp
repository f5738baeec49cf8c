// sova benchmarks — the allocators under test, each behind the same small
// shape so that every benchmark is one template over them:
//
//   std::string why_not;      non-empty: cannot run here (e.g. "no GPU"), and why
//   const char* label;        "cuda" or "sim": which world the timings come from
//   sova::SimDriver* sim;     streams it takes: CUDA streams (nullptr) or this sim's
//   void* allocate(bytes, stream);   throws std::runtime_error on failure
//   void deallocate(ptr, stream);    throws std::runtime_error on failure
//
//   std::uint64_t trim();            returns every cached byte to the device now
//                                    (after waiting for the device where the
//                                    allocator needs that to count frees as done),
//                                    high-water marks untouched; returns the bytes
//                                    still reserved (under live blocks; 0 where the
//                                    allocator cannot tell). pair_cold/ and growth/
//                                    call it outside their timed regions.
//
// and, where the allocator can tell (random/, multistream/ and growth/ read them):
//
//   void reset_peaks();              trims cached memory (after waiting for the
//                                    device), then resets the high-water marks
//   PeakFigures read_peaks();        reserved and used high-water marks since
//   sova::PoolStats pool_stats();    sova's counters (sova::Pool and the C API)
//
// Static dispatch: a timed loop makes no call the allocator itself would not.
// Pools are shared by the whole process (warm across benchmarks), made on
// first use and never destroyed, so none outlives the CUDA runtime at exit.
// Every pool here has release threshold UINT64_MAX: these benchmarks measure a
// warm pool, not mapping and unmapping.
#pragma once

#include "common.hpp"

#include <sova/pool.hpp>
#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sova_bench {

/// High-water marks since the last reset_peaks(), in bytes, as the allocator
/// counts them (cudaMemPoolAttrReservedMemHigh / UsedMemHigh and their kin).
struct PeakFigures {
  std::uint64_t reserved_high = 0;  ///< physical memory held
  std::uint64_t used_high = 0;      ///< bytes handed out (requested sizes)
};

/// cudaMalloc / cudaFree; the stream is ignored (cudaFree synchronizes the device).
struct CudaMalloc {
  static constexpr const char* kName = "cudaMalloc";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  CudaMalloc();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  /// Nothing: cudaMalloc keeps no cache of its own that a program can empty. 0.
  std::uint64_t trim() { return 0; }
};

/// cudaMallocAsync / cudaFreeAsync on device 0's default pool.
struct CudaAsyncDefault {
  static constexpr const char* kName = "cudaMallocAsync_default";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  CudaAsyncDefault();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  /// cudaDeviceSynchronize (frees not yet seen complete would stay), cudaMemPoolTrimTo(0);
  /// ReservedMemCurrent after it.
  std::uint64_t trim();
  /// cudaDeviceSynchronize, cudaMemPoolTrimTo(0), then ReservedMemHigh and
  /// UsedMemHigh set to 0 (which resets them to the current values).
  void reset_peaks();
  PeakFigures read_peaks();
};

/// For any of the driver's pools (the default pool here, RMM's cuda_async
/// resource in bench/rmm/): cudaDeviceSynchronize, cudaMemPoolTrimTo(0), then
/// ReservedMemHigh and UsedMemHigh set to 0 (which resets them to the current
/// values); and those two marks read back.
void reset_driver_pool_peaks(cudaMemPool_t pool);
PeakFigures read_driver_pool_peaks(cudaMemPool_t pool);

/// cudaMallocFromPoolAsync / cudaFreeAsync on a pool made with cudaMemPoolCreate.
struct CudaAsyncPool {
  static constexpr const char* kName = "cudaMallocAsync_pool";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  cudaMemPool_t pool = nullptr;
  CudaAsyncPool();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  /// cudaDeviceSynchronize, cudaMemPoolTrimTo(pool, 0); ReservedMemCurrent after it.
  std::uint64_t trim();
};

/// sovaMallocAsync / sovaFreeAsync on sova's current pool of device 0; on the
/// host simulation when there is no GPU (capi_sim()), labelled "sim" then.
struct SovaCapi {
  static constexpr const char* kName = "sova_capi";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  /// The pool the figures are read from: device 0's current pool (allocate
  /// goes to it through sovaMallocAsync), or the variants' own.
  sovaMemPool_t pool = nullptr;
  SovaCapi();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
  /// sovaMemPoolTrimTo(pool, 0) (it synchronizes the device when frees hold
  /// memory); ReservedMemCurrent after it.
  std::uint64_t trim();
  /// sovaMemPoolTrimTo(0) on `pool`, then its highs reset.
  void reset_peaks();
  PeakFigures read_peaks();
  /// sovaMemPoolGetStats on `pool`, as sova::PoolStats (the counters the
  /// sova::Pool cases report, for the C API's cases too).
  sova::PoolStats pool_stats() const;
};

/// sovaMallocFromPoolAsync on the device's current pool, sovaFreeAsync: the C
/// API without the current-device lookup, to locate the C layer's cost.
struct SovaCapiFromPool : SovaCapi {
  static constexpr const char* kName = "sova_capi_from_pool";
  void* allocate(std::size_t bytes, cudaStream_t stream);
};

/// The C API on a pool created with sovaMemPoolNoStreamChecks
/// (sovaMallocFromPoolAsync / sovaFreeAsync): what the stream checks cost there.
struct SovaCapiUnchecked : SovaCapiFromPool {
  static constexpr const char* kName = "sova_capi_unchecked";
  SovaCapiUnchecked();
};

/// sova::Pool::allocate / deallocate on the CUDA driver.
struct SovaPool {
  static constexpr const char* kName = "sova_pool";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  sova::Pool* pool = nullptr;
  SovaPool();
  void* allocate(std::size_t bytes, cudaStream_t stream) { return pool->allocate(bytes, stream); }
  void deallocate(void* ptr, cudaStream_t stream) { pool->deallocate(ptr, stream); }
  /// Pool::trim_to(0) (it synchronizes the device when frees hold memory);
  /// the bytes still reserved after it.
  std::uint64_t trim() {
    pool->trim_to(0);
    return pool->stats().reserved_current;
  }
  /// Pool::trim_to(0), then the pool's highs reset.
  void reset_peaks();
  PeakFigures read_peaks();
  /// sova's own counters (multistream/ reports cross-stream waits from them).
  sova::PoolStats pool_stats() const { return pool->stats(); }

 protected:
  /// For the variants below, which set `pool` (and `why_not`) themselves:
  /// makes no pool, not even the default one SovaPool() makes.
  struct NoPool {};
  explicit SovaPool(NoPool) {}
};

/// sova::Pool with another placement policy, or the default one without
/// physical remapping: the policy comparison of random/ and replay/
/// (docs/policies.md). Each its own warm pool.
struct SovaPoolSizeClasses : SovaPool {
  static constexpr const char* kName = "sova_size_classes";
  SovaPoolSizeClasses();
};
struct SovaPoolBuddy : SovaPool {
  static constexpr const char* kName = "sova_buddy";
  SovaPoolBuddy();
};
struct SovaPoolBestFit : SovaPool {
  static constexpr const char* kName = "sova_best_fit";
  SovaPoolBestFit();
};
/// The default policy with RemapEffort::thorough: more chunk moves, smaller
/// chunks, for less reserved memory where free memory lies in pieces.
struct SovaPoolThorough : SovaPool {
  static constexpr const char* kName = "sova_thorough";
  SovaPoolThorough();
};
struct SovaPoolNoRemap : SovaPool {
  static constexpr const char* kName = "sova_pool_noremap";
  SovaPoolNoRemap();
};

/// sova::Pool with PoolOptions::check_streams = false: none of the stream
/// checks' driver calls per allocation or free (no graph-capture or
/// reused-handle checks), to show what those checks cost.
struct SovaPoolUnchecked : SovaPool {
  static constexpr const char* kName = "sova_pool_unchecked";
  SovaPoolUnchecked();
};

/// sova::Pool on shared_sim(): runs everywhere, for smoke testing; host timings.
struct SovaPoolSim : SovaPool {
  static constexpr const char* kName = "sova_pool_sim";
  SovaPoolSim();
};

}  // namespace sova_bench
