// burst/<allocator>: 10,000 small allocations kept live on one stream (sizes
// cycling 256 B..64 KiB, about 175 MB live), then all 10,000 freed in allocation
// order; one iteration is the whole burst. Warm: one burst ran before timing,
// so the pool already holds the memory and this measures bookkeeping with many
// live blocks, not growth. Wall time (UseRealTime). Counters: pairs per
// second and seconds per pair.
// Peers: cudaMallocAsync 2.97 us a pair, cudaMalloc 6.1 us (docs/benchmarks.md).
//
// A header so that sova_bench (burst.cpp) and sova_bench_rmm share the loop.
#pragma once

#include "cases.hpp"

#include <vector>

namespace sova_bench {

inline constexpr std::size_t kBurst = 10000;

template <class A>
void BM_burst(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    Stream stream(a.sim);
    std::vector<void*> live(kBurst);
    auto burst = [&] {
      for (std::size_t i = 0; i < kBurst; ++i) live[i] = a.allocate(kSmallSizes[i % kSmallSizeCount], stream.get());
      for (void* p : live) a.deallocate(p, stream.get());
    };
    burst();  // warm
    for (auto _ : state) burst();
    stream.sync();
    const auto pairs = static_cast<double>(state.iterations() * kBurst);
    state.counters["pairs"] = benchmark::Counter(pairs, benchmark::Counter::kIsRate);
    state.counters["s_per_pair"] = benchmark::Counter(pairs, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  });
}

/// Registers burst/<A::kName>.
template <class A>
benchmark::internal::Benchmark* register_burst() {
  return benchmark::RegisterBenchmark(case_name<A>("burst").c_str(), BM_burst<A>)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace sova_bench
