// replay/<trace>/<allocator> (replay.hpp) for sova and the CUDA runtime's
// allocators: every variant of allocators.hpp that reports peaks; and
// memory_now (memory_now.hpp) for them, from the same statistics read_peaks
// reads.
#include "replay.hpp"

#include "../allocators.hpp"
#include "../pool_attributes.hpp"

namespace sova_bench {

MemoryNow memory_now(SovaPool& a) {  // and its variants, SovaPoolSim included
  const sova::PoolStats s = a.pool->stats();
  return {s.reserved_current, s.used_current};
}

MemoryNow memory_now(SovaCapi& a) { return kSovaPoolApi.memory_now(a.pool); }

MemoryNow memory_now(CudaAsyncDefault&) {
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  return kDriverPoolApi.memory_now(pool);
}

void register_replay_cases(int& argc, char** argv) {
  take_replay_flags(argc, argv);
  const std::vector<TraceFile> traces = find_traces();
  benchmark::AddCustomContext("replay_traces", describe_traces(traces));
  register_replay<SovaPool>(traces);
  register_replay<SovaPoolNoRemap>(traces);
  register_replay<SovaPoolThorough>(traces);
  register_replay<SovaPoolSizeClasses>(traces);
  register_replay<SovaPoolBuddy>(traces);
  register_replay<SovaPoolBestFit>(traces);
  register_replay<SovaPoolUnchecked>(traces);
  register_replay<SovaCapi>(traces);
  register_replay<SovaCapiFromPool>(traces);
  register_replay<SovaCapiUnchecked>(traces);
  register_replay<CudaAsyncDefault>(traces);
  register_replay<SovaPoolSim>(traces);
}

}  // namespace sova_bench
