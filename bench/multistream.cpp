// multistream/<allocator>/random_sizes:{0,1} for sova, the CUDA runtime's
// allocators and the preallocated floor; the workload is in multistream.hpp
// (shared with sova_bench_torch), the rig in multistream_rig.cpp.
#include "multistream.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_multistream<MultiStreamFloor>();
  register_multistream<SovaPool>();
  register_multistream<SovaPoolUnchecked>();
  register_multistream<SovaCapi>();
  register_multistream<CudaAsyncDefault>();
  register_multistream<CudaMalloc>();
  register_multistream<MultiStreamFloorSim>();
  register_multistream<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
