// growth/<allocator>: one buffer grown the way a std::vector grows, from an
// empty allocator, by kGrowthSteps equal steps (GPU: 64 MiB steps up to 4 GiB).
// Each step allocates the new size, copies the old contents into it
// (cudaMemcpyAsync device to device, on the stream) and frees the old buffer;
// the last buffer is freed at the end. Before each growth, untimed, the
// allocator returns all its cached memory (trim(), allocators.hpp), so every
// growth maps what it needs, as a program's first growth does; with threshold
// UINT64_MAX nothing is released during a growth, so the pool may reuse what
// earlier steps freed.
//
// What it shows: the memory an allocator's placement costs when block sizes
// only grow (the old buffer and the new one are live together, and a freed
// buffer is always smaller than the next request: a pool that cannot join
// freed memory with new memory keeps mapping more), and the time per step,
// most of it the copy on the GPU.
//
// Timing: manual, host clock from the first allocation to the end of the
// stream synchronize after the last free; the trim before it is left out.
// Counters: s_per_step (that time per step), alloc_s_per_step (host time
// inside allocate and deallocate calls, per step: the mapping cost apart from
// the copies; for cudaMalloc it includes cudaFree waiting for the copy), and
// where the allocator keeps high-water marks (read_peaks), over all growths of
// the case: peak_used_MiB (about 2 x the final size - one step: old and new
// buffer live together), peak_res_MiB and res_over_used, their ratio.
//
// On the host simulation (a 1 GiB device shared by sova_pool_sim and, without
// a GPU, sova_capi; memory backed by host memfd files) the steps are 2 MiB, up
// to 128 MiB, which leaves the device room for a reserved peak of twice or
// three times the used one, and there is no copy (the simulation has no
// memcpy; a host copy would time this host's memory bandwidth): the label says
// so. Smoke test only.
//
// Fixed iteration count: one growth copies 126 GiB on the GPU (~0.1 s) and
// every iteration pays an untimed trim; Google Benchmark's search for an
// iteration count would mostly repeat growths it does not report.
//
// A header so that other programs' peers (sova_bench_torch, sova_bench_rmm) can
// share it: they need trim() (allocators.hpp). sova_bench registers its
// allocators in growth.cpp.
#pragma once

#include "cases.hpp"

#include <cstddef>
#include <string>

namespace sova_bench {

inline constexpr std::size_t kGrowthSteps = 64;
inline constexpr std::size_t kGrowthGpuStep = std::size_t{64} << 20;  // to 4 GiB
inline constexpr std::size_t kGrowthSimStep = std::size_t{2} << 20;   // to 128 MiB
inline constexpr long kGrowths = 2;                                   // per repetition

struct GrowthTimes {
  double total = 0;         ///< seconds, first allocation to the final synchronize
  double in_allocator = 0;  ///< seconds inside allocate and deallocate
};

/// One growth on `stream` by kGrowthSteps steps of `step` bytes, copying on
/// the GPU (`a.sim` null). On an exception, frees what it holds before rethrowing.
template <class A>
GrowthTimes grow(A& a, const Stream& stream, std::size_t step) {
  GrowthTimes t;
  void* buffer = nullptr;
  void* bigger = nullptr;
  const Clock::time_point start = Clock::now();
  try {
    for (std::size_t k = 1; k <= kGrowthSteps; ++k) {
      Clock::time_point call = Clock::now();
      bigger = a.allocate(k * step, stream.get());
      t.in_allocator += seconds_since(call);
      if (buffer != nullptr) {
        if (a.sim == nullptr) {
          check_cuda(cudaMemcpyAsync(bigger, buffer, (k - 1) * step, cudaMemcpyDeviceToDevice, stream.get()),
                     "cudaMemcpyAsync");
        }
        call = Clock::now();
        a.deallocate(buffer, stream.get());
        t.in_allocator += seconds_since(call);
      }
      buffer = bigger;
      bigger = nullptr;
    }
    const Clock::time_point call = Clock::now();
    a.deallocate(buffer, stream.get());
    t.in_allocator += seconds_since(call);
    buffer = nullptr;
    stream.sync();
  } catch (...) {
    for (void* p : {buffer, bigger}) {
      if (p == nullptr) continue;
      try {
        a.deallocate(p, stream.get());
      } catch (...) {
      }
    }
    throw;
  }
  t.total = seconds_since(start);
  return t;
}

template <class A>
void BM_growth(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    constexpr bool kHasPeaks = requires { a.read_peaks(); };
    constexpr double kMiB = 1024.0 * 1024.0;
    const std::size_t step = a.sim != nullptr ? kGrowthSimStep : kGrowthGpuStep;
    if (a.sim != nullptr) {
      state.SetLabel(std::string(a.label) + " (" + std::to_string(step >> 20) + " MiB steps to " +
                     std::to_string((kGrowthSteps * step) >> 20) + " MiB, no copy)");
    }
    Stream stream(a.sim);
    trim_to_empty(a);
    if constexpr (kHasPeaks) a.reset_peaks();  // highs from here: this case's growths only
    grow(a, stream, step);                     // untimed: first-use costs (stream state, the copy engine)
    GrowthTimes sum;
    for (auto _ : state) {
      trim_to_empty(a);
      const GrowthTimes t = grow(a, stream, step);
      state.SetIterationTime(t.total);
      sum.total += t.total;
      sum.in_allocator += t.in_allocator;
    }
    const double steps = static_cast<double>(state.iterations()) * static_cast<double>(kGrowthSteps);
    state.counters["s_per_step"] = benchmark::Counter(sum.total / steps);
    state.counters["alloc_s_per_step"] = benchmark::Counter(sum.in_allocator / steps);
    if constexpr (kHasPeaks) {
      const PeakFigures peaks = a.read_peaks();
      state.counters["peak_used_MiB"] = benchmark::Counter(static_cast<double>(peaks.used_high) / kMiB);
      state.counters["peak_res_MiB"] = benchmark::Counter(static_cast<double>(peaks.reserved_high) / kMiB);
      if (peaks.used_high != 0) {
        state.counters["res_over_used"] =
            benchmark::Counter(static_cast<double>(peaks.reserved_high) / static_cast<double>(peaks.used_high));
      }
    }
    a.trim();  // give the gigabytes back for the cases after this one
  });
}

template <class A>
benchmark::internal::Benchmark* register_growth() {
  return benchmark::RegisterBenchmark(case_name<A>("growth").c_str(), BM_growth<A>)
      ->UseManualTime()
      ->Iterations(kGrowths)
      ->Unit(benchmark::kMillisecond);
}

}  // namespace sova_bench
