// pair_cold/<allocator>/<bytes>: one allocate + free of the same size on one
// stream, as pair/ (pair.hpp), but with nothing cached: before every timed
// pair the allocator returns all its cached memory to the device (trim(), see
// allocators.hpp), so the allocation must create and map physical memory; the
// case fails if memory stays reserved (live blocks an earlier case left). The
// price of the first allocation of a size, or of any allocation after the pool
// gave its memory back (release threshold 0, the default of sova and the
// driver); this minus pair/ is what caching saves.
//
// The pools keep threshold UINT64_MAX (allocators.cpp): trim() releases
// everything whatever the threshold, and with UINT64_MAX nothing is released
// behind the benchmark's back (sova's release worker, the driver at a
// synchronize), so each pair starts from exactly the state trim() left.
//
// Timing: manual (UseManualTime), one steady_clock interval around the
// allocate and the free only. The trim between pairs synchronizes the device
// and unmaps memory (tens of us to ms), so it must stay out. PauseTiming/
// ResumeTiming would keep it out too, but each stops and restarts Google
// Benchmark's timers, reading the process CPU clock as well as the wall clock
// (about a microsecond per pair together, part of it inside the timed region),
// which is a visible error on pairs of 20-100 us; two clock reads (~20 ns each)
// are not. No synchronize inside the interval, as in pair/: a program sees the
// host time of the calls.
//
// Fixed iteration count: each iteration also pays an untimed trim, so Google
// Benchmark's search for an iteration count reaching the minimum time (which
// counts timed time only) would run several times longer than the figure it
// reports. kColdPairs pairs at 50-1000 us each keep a case under a second.
//
// A header so that other programs' peers (sova_bench_torch, sova_bench_rmm) can
// share it: they need trim() (allocators.hpp). sova_bench registers its
// allocators in pair_cold.cpp.
#pragma once

#include "cases.hpp"

#include <cstddef>

namespace sova_bench {

inline constexpr long kColdPairs = 100;

template <class A>
void BM_pair_cold(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    const auto bytes = static_cast<std::size_t>(state.range(0));
    Stream stream(a.sim);
    auto pair = [&] {
      stream.sync();
      trim_to_empty(a);
      const Clock::time_point start = Clock::now();
      void* p = a.allocate(bytes, stream.get());
      benchmark::DoNotOptimize(p);
      a.deallocate(p, stream.get());
      return seconds_since(start);
    };
    pair();  // untimed: the stream's first call (sova makes its per-stream state), one-off costs
    for (auto _ : state) state.SetIterationTime(pair());
    stream.sync();
    a.trim();  // leave nothing mapped for the cases after this one
  });
}

/// Registers pair_cold/<A::kName>/<bytes> for pair/'s sizes and 256 MiB.
template <class A>
benchmark::internal::Benchmark* register_pair_cold() {
  auto* b = benchmark::RegisterBenchmark(case_name<A>("pair_cold").c_str(), BM_pair_cold<A>);
  for (long bytes : {256L, 4L << 10, 64L << 10, 1L << 20, 4L << 20, 64L << 20, 256L << 20}) b->Arg(bytes);
  return b->UseManualTime()->Iterations(kColdPairs)->Unit(benchmark::kMicrosecond);
}

}  // namespace sova_bench
