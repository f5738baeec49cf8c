// seed/<variant>/threshold_max:{0,1}: the seed loop (seed/seed.hpp) as Google
// Benchmark cases. One iteration is one whole 100 x (allocate 4 MiB, kernel,
// free) loop, timed by the host clock around the loop plus the stream
// synchronize and reported with manual time. threshold_max:0 leaves both
// pools' release threshold at 0 (their default: what a drop-in user gets);
// threshold_max:1 sets UINT64_MAX. The 4 MiB are checked once per case before
// timing, and the kernel counts wrong values throughout: any is an error.
// Peers: cudaMalloc 10.4 ms, cudaMallocAsync 0.75 ms, preallocated 0.65 ms.
#include "seed/seed.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <exception>
#include <string>

namespace sova_bench {
namespace {

#if defined(SOVA_BENCH_KERNELS)
void BM_seed(benchmark::State& state, SeedVariant v) {
  if (!have_gpu()) {
    state.SkipWithError("no GPU");
    return;
  }
  if (capi_sim() != nullptr) {
    state.SkipWithError("sova's C API runs on the host simulation (SOVA_DRIVER=sim)");
    return;
  }
  try {
    static GpuSeed& seed = *new GpuSeed;  // one stream and buffer for all seed cases; never destroyed
    seed.set_release_threshold(state.range(0) != 0 ? UINT64_MAX : 0);
    const std::uint64_t errors_before = seed.kernel_errors();
    seed.verify(v);
    for (auto _ : state) state.SetIterationTime(seed.run(v));
    if (seed.kernel_errors() != errors_before) state.SkipWithError("the kernel read back wrong values");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}
#else
void BM_seed(benchmark::State& state, SeedVariant) {
  state.SkipWithError(have_gpu() ? "built without CUDA kernels (no nvcc, or -Dgpu=disabled)" : "no GPU");
}
#endif

[[maybe_unused]] const bool registered = [] {
  for (int i = 0; i < kSeedVariants; ++i) {
    const auto v = static_cast<SeedVariant>(i);
    benchmark::RegisterBenchmark((std::string("seed/") + seed_variant_name(v)).c_str(), BM_seed, v)
        ->ArgName("threshold_max")
        ->Arg(0)
        ->Arg(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace sova_bench
