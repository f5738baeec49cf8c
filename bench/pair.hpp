// pair/<allocator>/<bytes>: one allocate + free of the same size on one stream
// per iteration, pool warm (a block of that size was freed on this stream just
// before). No kernels and no synchronize inside the loop: this is the cost an
// allocator adds to every allocation in a steady loop, its fast path. Wall
// time (UseRealTime), as the program sees it: cudaFree, for one, waits.
// Peers (docs/benchmarks.md): cudaMallocAsync ~1.2 us, cudaMalloc ~95 us.
//
// A header so that sova_bench (pairs.cpp) and sova_bench_torch share the loop.
#pragma once

#include "cases.hpp"

namespace sova_bench {

/// The timed loop: state.range(0) bytes allocated and freed on a stream of
/// its own, after one untimed pair (shared with pair_beside_graph/).
template <class A>
void pair_loop(benchmark::State& state, A& a) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  Stream stream(a.sim);
  a.deallocate(a.allocate(bytes, stream.get()), stream.get());  // warm
  for (auto _ : state) {
    void* p = a.allocate(bytes, stream.get());
    benchmark::DoNotOptimize(p);
    a.deallocate(p, stream.get());
  }
  stream.sync();
}

template <class A>
void BM_pair(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) { pair_loop(state, a); });
}

/// Registers pair/<A::kName>/<bytes> for 256 B, 4 KiB, 64 KiB, 1 MiB, 4 MiB, 64 MiB.
template <class A>
benchmark::internal::Benchmark* register_pair() {
  auto* b = benchmark::RegisterBenchmark(case_name<A>("pair").c_str(), BM_pair<A>);
  for (long bytes : {256L, 4L << 10, 64L << 10, 1L << 20, 4L << 20, 64L << 20}) b->Arg(bytes);
  return b->UseRealTime()->Unit(benchmark::kNanosecond);
}

}  // namespace sova_bench
