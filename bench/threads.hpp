// threads/<allocator>/threads:T: T host threads, each with its own stream,
// each iteration one allocate + free of a small block (sizes cycling
// 256 B..64 KiB), all threads on the allocator's one shared pool. The "pairs"
// counter is the aggregate rate of all threads (wall time, UseRealTime): an
// allocator that scales keeps it growing with T. Peers: cudaMallocAsync
// 0.60 M pairs/s on 1 thread, 0.11 M on 16 (docs/benchmarks.md).
//
// A header so that sova_bench (threads.cpp) and sova_bench_rmm share the loop.
#pragma once

#include "cases.hpp"

namespace sova_bench {

template <class A>
void BM_threads(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    Stream stream(a.sim);
    for (std::size_t bytes : kSmallSizes) a.deallocate(a.allocate(bytes, stream.get()), stream.get());
    std::size_t next = static_cast<std::size_t>(state.thread_index()) % kSmallSizeCount;
    for (auto _ : state) {
      void* p = a.allocate(kSmallSizes[next], stream.get());
      benchmark::DoNotOptimize(p);
      a.deallocate(p, stream.get());
      if (++next == kSmallSizeCount) next = 0;
    }
    stream.sync();
    // Summed over threads, divided by wall time: aggregate pairs per second.
    state.counters["pairs"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  });
}

/// Registers threads/<A::kName>/threads:{1,2,4,8,16}.
template <class A>
benchmark::internal::Benchmark* register_threads() {
  return benchmark::RegisterBenchmark(case_name<A>("threads").c_str(), BM_threads<A>)
      ->Threads(1)
      ->Threads(2)
      ->Threads(4)
      ->Threads(8)
      ->Threads(16)
      ->UseRealTime()
      ->Unit(benchmark::kNanosecond);
}

}  // namespace sova_bench
