// sova seed loop — what both drivers' loops share (see seed.hpp).
#include "seed.hpp"

#include <stdexcept>
#include <string>

namespace sova_bench {

std::size_t seed_block_bytes(std::size_t mib) {
  if (mib < 1 || mib > kSeedMaxMiB) {
    throw std::invalid_argument("the seed's block is 1 to " + std::to_string(kSeedMaxMiB) + " MiB, not " +
                                std::to_string(mib));
  }
  return mib << 20;
}

const char* seed_variant_name(SeedVariant v) {
  switch (v) {
    case SeedVariant::cuda_malloc: return "cudaMalloc";
    case SeedVariant::cuda_malloc_async: return "cudaMallocAsync";
    case SeedVariant::sova: return "sova";
    case SeedVariant::preallocated: return "preallocated";
  }
  return "?";
}

void set_seed_thresholds(std::uint64_t bytes, bool runtime_pool_too) {
  sovaMemPool_t sova_pool = nullptr;
  check_cuda(sovaDeviceGetMemPool(&sova_pool, 0), "sovaDeviceGetMemPool");
  check_cuda(sovaMemPoolSetAttribute(sova_pool, cudaMemPoolAttrReleaseThreshold, &bytes),
             "sovaMemPoolSetAttribute(ReleaseThreshold)");
  if (runtime_pool_too) {
    cudaMemPool_t pool = nullptr;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &bytes),
               "cudaMemPoolSetAttribute(ReleaseThreshold)");
  }
}

}  // namespace sova_bench
