// sova_bench — Google Benchmark cases for sova against the CUDA runtime's
// allocators: pair/ (warm allocate+free by size), threads/ (aggregate pairs/s
// over 1..16 threads), burst/ (10k live then 10k frees), seed/ (the seed loop),
// multistream/ (4 streams, long kernels on temporaries), random/
// (RMM's random_allocations shape, throughput and peak memory),
// replay/ (recorded allocation traces; replay/replay.hpp),
// pair_cold/ (allocate+free by size with nothing cached: mapping) and growth/
// (one buffer grown to 4 GiB in 64 MiB steps, copying: time and peak memory).
// PyTorch's allocator runs the same workloads in sova_bench_torch (bench/torch/).
// Cases that need a GPU skip with "no GPU" where there is none; *_sim cases
// (and sova_capi, without a GPU) run on sova's host simulation, labelled "sim":
// host timings, for smoke testing, not GPU figures.
#include "common.hpp"
#include "replay/replay.hpp"

#include <benchmark/benchmark.h>

int main(int argc, char** argv) {
  sova_bench::register_replay_cases(argc, argv);  // takes --trace_dir etc. out of argv first
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Before any C API call: without a GPU this puts sova's C API on the sim.
  const bool capi_on_sim = sova_bench::capi_sim() != nullptr;
  benchmark::AddCustomContext("gpu", sova_bench::device_name());
  benchmark::AddCustomContext("sova_capi_driver", capi_on_sim ? "sim" : "cuda");
  if (!sova_bench::have_gpu()) {
    benchmark::AddCustomContext("note",
                                "no CUDA GPU found: GPU cases skip; *_sim and sova_capi cases "
                                "run on sova's host simulation (host timings, not GPU timings)");
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
