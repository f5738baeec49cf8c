// threads/<allocator>/threads:T for sova and cudaMallocAsync; the loop itself
// is in threads.hpp (shared with sova_bench_rmm).
#include "threads.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_threads<SovaCapi>();
  register_threads<SovaPool>();
  register_threads<SovaPoolUnchecked>();
  register_threads<CudaAsyncDefault>();
  register_threads<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
