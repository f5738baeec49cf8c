// seed/<variant>/threshold_max:{0,1}/mib:{1,4,64}: the seed loop
// (seed/seed.hpp) as Google Benchmark cases. One iteration is one whole
// 100 x (allocate N MiB, kernel, free) loop, timed by the host clock around the
// loop plus the stream synchronize and reported with manual time.
// threshold_max:0 leaves both pools' release threshold at 0 (their default:
// what a drop-in user gets); threshold_max:1 sets UINT64_MAX. mib:4 is the seed
// program's own block (sova_seed); mib:1 stays below a 2 MiB granule, mib:64
// spans many. Every float of the block is checked once per case before timing,
// and the kernel counts wrong values throughout: any is an error.
// Peers at 4 MiB: cudaMalloc 10.4 ms, cudaMallocAsync 0.75 ms, preallocated 0.65 ms.
#include "seed/seed.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

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
    seed.set_block_mib(static_cast<std::size_t>(state.range(1)));
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
  std::vector<std::int64_t> mibs;
  for (std::size_t mib : kSeedCaseMiBs) mibs.push_back(static_cast<std::int64_t>(mib));
  for (int i = 0; i < kSeedVariants; ++i) {
    const auto v = static_cast<SeedVariant>(i);
    benchmark::RegisterBenchmark((std::string("seed/") + seed_variant_name(v)).c_str(), BM_seed, v)
        ->ArgNames({"threshold_max", "mib"})
        ->ArgsProduct({{0, 1}, mibs})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}();

}  // namespace
}  // namespace sova_bench
