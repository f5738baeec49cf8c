// sova benchmarks — the allocators under test, each behind the same small
// shape so that every benchmark is one template over them:
//
//   std::string why_not;      non-empty: cannot run here (e.g. "no GPU"), and why
//   const char* label;        "cuda" or "sim": which world the timings come from
//   sova::SimDriver* sim;     streams it takes: CUDA streams (nullptr) or this sim's
//   void* allocate(bytes, stream);   throws std::runtime_error on failure
//   void deallocate(ptr, stream);    throws std::runtime_error on failure
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
#include <string>

namespace sova_bench {

/// cudaMalloc / cudaFree; the stream is ignored (cudaFree synchronizes the device).
struct CudaMalloc {
  static constexpr const char* kName = "cudaMalloc";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  CudaMalloc();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
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
};

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
};

/// sovaMallocAsync / sovaFreeAsync on sova's current pool of device 0; on the
/// host simulation when there is no GPU (capi_sim()), labelled "sim" then.
struct SovaCapi {
  static constexpr const char* kName = "sova_capi";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  SovaCapi();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
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
};

/// sova::Pool on shared_sim(): runs everywhere, for smoke testing; host timings.
struct SovaPoolSim {
  static constexpr const char* kName = "sova_pool_sim";
  std::string why_not;
  const char* label = "sim";
  sova::SimDriver* sim = nullptr;
  sova::Pool* pool = nullptr;
  SovaPoolSim();
  void* allocate(std::size_t bytes, cudaStream_t stream) { return pool->allocate(bytes, stream); }
  void deallocate(void* ptr, cudaStream_t stream) { pool->deallocate(ptr, stream); }
};

}  // namespace sova_bench
