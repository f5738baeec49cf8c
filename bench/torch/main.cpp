// sova_bench_torch — PyTorch's CUDA caching allocator, native and with
// expandable segments, on the workloads sova_bench runs: pair/ (pair.hpp),
// multistream/ (multistream.hpp), random/ (random_allocs.hpp). Case names are
// those of sova_bench with allocator torch_caching or torch_expandable, so that
// tools/plot_bench.py can put both programs' JSON side by side. Built only
// where meson found PyTorch (bench/torch/meson.build); every case needs a GPU.
#include "../multistream.hpp"
#include "../pair.hpp"
#include "../random_allocs.hpp"
#include "torch_allocator.hpp"

#include <benchmark/benchmark.h>

#ifndef SOVA_TORCH_VERSION
#define SOVA_TORCH_VERSION "unknown"
#endif

namespace sova_bench {
namespace {

[[maybe_unused]] const bool registered = [] {
  register_pair<TorchCaching>();
  register_pair<TorchExpandable>();
  register_multistream<TorchCaching>();
  register_multistream<TorchExpandable>();
  register_random<TorchCaching>(10000);
  register_random<TorchExpandable>(10000);
  return true;
}();

}  // namespace
}  // namespace sova_bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("gpu", sova_bench::device_name());
  benchmark::AddCustomContext("torch_version", SOVA_TORCH_VERSION);
  benchmark::AddCustomContext("torch_allocator", sova_bench::torch_allocator_name());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
