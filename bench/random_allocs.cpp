// random/<allocator>/max_mib:M/allocs:N (see random_allocs.hpp) for sova and
// the CUDA runtime's allocators; the trace generator is in random_trace.cpp.
#include "random_allocs.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_random<SovaPool>(10000);
  // The granule-chunk variant is left out: at 64 and 256 MiB it took 5.8 s and
  // 19 s a repetition on the H100 (docs/benchmarks.md, "Chunk size").
  register_random<SovaPoolNoRemap>(10000);
  register_random<SovaPoolThorough>(10000);
  register_random<SovaPoolSizeClasses>(10000);
  register_random<SovaPoolBuddy>(10000);
  register_random<SovaPoolBestFit>(10000);
  register_random<SovaCapi>(10000);
  register_random<CudaAsyncDefault>(10000);
  // 0.1-1 ms a pair (cudaFree synchronizes the device): fewer allocations.
  register_random<CudaMalloc>(1000);
  register_random<SovaPoolSim>(static_cast<long>(kSimAllocs));
  return true;
}();

}  // namespace
}  // namespace sova_bench
