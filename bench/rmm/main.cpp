// sova_bench_rmm — RAPIDS RMM's memory resources on the workloads sova_bench
// runs: pair/ (pair.hpp), threads/ (threads.hpp), burst/ (burst.hpp),
// multistream/ (multistream.hpp), random/ (random_allocs.hpp) and replay/
// (replay/replay.hpp; not for rmm_arena, which reports no peaks). Case names
// are those of sova_bench with allocators rmm_pool, rmm_binning,
// rmm_cuda_async, rmm_arena and sova_rmm (sova through its RMM adapter;
// rmm_allocators.hpp says what each is), so that
// tools/plot_bench.py puts the programs' JSON side by side. Built only where
// meson was given RMM (-Drmm_root, bench/rmm/meson.build); every case needs a
// GPU and skips with "no GPU" without one.
//
//   sova_bench_rmm [--trace_dir=DIR ...] [Google Benchmark flags]
//
// The replay flags are sova_bench's (replay/catalog.hpp). The seed/ cases are
// not here: their variants are fixed in seed/seed.hpp. The JSON context
// records rmm_version and rmm_resources (the settings).
#include "../burst.hpp"
#include "../multistream.hpp"
#include "../pair.hpp"
#include "../random_allocs.hpp"
#include "../replay/replay.hpp"
#include "../threads.hpp"
#include "rmm_allocators.hpp"

#include <benchmark/benchmark.h>

#include <vector>

namespace {

template <class A>
void register_cases() {
  sova_bench::register_pair<A>();
  sova_bench::register_threads<A>();
  sova_bench::register_burst<A>();
  sova_bench::register_multistream<A>();
  sova_bench::register_random<A>(10000);
}

}  // namespace

int main(int argc, char** argv) {
  sova_bench::take_replay_flags(argc, argv);  // --trace_dir etc. (replay/catalog.hpp)
  const std::vector<sova_bench::TraceFile> traces = sova_bench::find_traces();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The arena last: made by its first case, it keeps half the free memory
  // for the rest of the process (the others give theirs back after random/
  // and replay/).
  register_cases<sova_bench::RmmPool>();
  register_cases<sova_bench::RmmBinning>();
  register_cases<sova_bench::RmmCudaAsync>();
  register_cases<sova_bench::SovaRmm>();
  sova_bench::register_replay<sova_bench::RmmPool>(traces);
  sova_bench::register_replay<sova_bench::RmmBinning>(traces);
  sova_bench::register_replay<sova_bench::RmmCudaAsync>(traces);
  sova_bench::register_replay<sova_bench::SovaRmm>(traces);
  register_cases<sova_bench::RmmArena>();

  benchmark::AddCustomContext("gpu", sova_bench::device_name());
  benchmark::AddCustomContext("rmm_version", sova_bench::rmm_version());
  benchmark::AddCustomContext("rmm_resources", sova_bench::rmm_resources());
  benchmark::AddCustomContext("replay_traces", sova_bench::describe_traces(traces));
  if (!sova_bench::have_gpu()) {
    benchmark::AddCustomContext("note", "no CUDA GPU found: every RMM case skips");
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
