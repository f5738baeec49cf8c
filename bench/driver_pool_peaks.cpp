// The driver's pools' high-water marks (allocators.hpp): shared by
// sova_bench (cudaMallocAsync's default pool) and sova_bench_rmm (RMM's
// cuda_async resource), hence among bench_shared_sources.
#include "allocators.hpp"
#include "pool_attributes.hpp"

namespace sova_bench {

void reset_driver_pool_peaks(cudaMemPool_t pool) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // frees complete: trimmable
  kDriverPoolApi.reset_peaks(pool);
}

PeakFigures read_driver_pool_peaks(cudaMemPool_t pool) { return kDriverPoolApi.read_peaks(pool); }

}  // namespace sova_bench
