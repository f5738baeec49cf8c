// pair/<allocator>/<bytes> for sova and the CUDA runtime's allocators; the
// loop itself is in pair.hpp (shared with sova_bench_torch).
#include "pair.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_pair<SovaPool>();
  register_pair<SovaPoolUnchecked>();
  register_pair<SovaCapi>();
  register_pair<SovaCapiFromPool>();
  register_pair<SovaCapiUnchecked>();
  register_pair<CudaAsyncDefault>();
  register_pair<CudaAsyncPool>();
  // ~100 us a pair (cudaFree synchronizes the device): a fixed, smaller count.
  register_pair<CudaMalloc>()->Iterations(500);
  register_pair<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
