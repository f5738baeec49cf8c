// burst/<allocator> for sova and the CUDA runtime's allocators; the loop
// itself is in burst.hpp (shared with sova_bench_rmm).
#include "burst.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_burst<SovaCapi>();
  register_burst<SovaPool>();
  register_burst<CudaAsyncDefault>();
  register_burst<CudaMalloc>();
  register_burst<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
