// growth/<allocator> for sova and the CUDA runtime's allocators; the workload
// is in growth.hpp.
#include "growth.hpp"

namespace sova_bench {
namespace {

// The allocators of burst/ and random/. The variants that differ from these
// only by per-call checks or the C API's pool lookup (tens of ns a call) are
// left out: against steps of a millisecond they would only repeat a figure.
[[maybe_unused]] const bool registered = [] {
  register_growth<SovaPool>();
  register_growth<SovaCapi>();
  register_growth<CudaAsyncDefault>();
  register_growth<CudaMalloc>();
  register_growth<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
