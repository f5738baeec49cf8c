// pair_cold/<allocator>/<bytes> for sova and the CUDA runtime's allocators (the
// allocators of pair/, pairs.cpp); the workload is in pair_cold.hpp.
#include "pair_cold.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_pair_cold<SovaPool>();
  register_pair_cold<SovaPoolUnchecked>();
  register_pair_cold<SovaCapi>();
  register_pair_cold<SovaCapiFromPool>();
  register_pair_cold<SovaCapiUnchecked>();
  register_pair_cold<CudaAsyncDefault>();
  register_pair_cold<CudaAsyncPool>();
  register_pair_cold<CudaMalloc>();
  register_pair_cold<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
