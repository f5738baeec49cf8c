// The driver's pools' high-water marks (allocators.hpp): shared by
// sova_bench (cudaMallocAsync's default pool) and sova_bench_rmm (RMM's
// cuda_async resource), hence among bench_shared_sources.
#include "allocators.hpp"

#include <cstdint>

namespace sova_bench {

void reset_driver_pool_peaks(cudaMemPool_t pool) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // frees complete: trimmable
  check_cuda(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
  std::uint64_t zero = 0;
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero),
             "cudaMemPoolSetAttribute(ReservedMemHigh)");
  check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero),
             "cudaMemPoolSetAttribute(UsedMemHigh)");
}

PeakFigures read_driver_pool_peaks(cudaMemPool_t pool) {
  PeakFigures peaks;
  check_cuda(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &peaks.reserved_high),
             "cudaMemPoolGetAttribute(ReservedMemHigh)");
  check_cuda(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &peaks.used_high),
             "cudaMemPoolGetAttribute(UsedMemHigh)");
  return peaks;
}

}  // namespace sova_bench
