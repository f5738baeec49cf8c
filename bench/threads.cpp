// threads/<allocator>/threads:T and threads_mixed/<allocator>/classes:C/threads:T
// for sova and cudaMallocAsync; the loops are in threads.hpp and
// threads_mixed.hpp (shared with sova_bench_rmm and sova_bench_torch).
#include "threads.hpp"
#include "threads_mixed.hpp"

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_threads<SovaCapi>();
  register_threads<SovaPool>();
  register_threads<SovaPoolUnchecked>();
  register_threads<CudaAsyncDefault>();
  register_threads<SovaPoolSim>();
  register_threads_mixed<SovaCapi>();
  register_threads_mixed<SovaPool>();
  register_threads_mixed<SovaPoolUnchecked>();
  register_threads_mixed<CudaAsyncDefault>();
  register_threads_mixed<SovaPoolSim>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
