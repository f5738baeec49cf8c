// random/<allocator>/max_mib:M/allocs:N — the shape of RMM's
// benchmarks/random_allocations: 2N operations on one stream; each is an
// allocation with probability 73% (while fewer than N were made and the live
// bytes stay under a cap) and otherwise the free of a live block chosen
// uniformly at random; sizes uniform in [1 B, M MiB]. With RMM's cap of
// 16000 MiB live. The trace is generated once (fixed seed) and replayed, so
// every iteration and every allocator sees the same calls; no kernels, one
// stream synchronize at the end of each replay (timed).
//
// Differences from RMM, on purpose: a non-blocking stream of our own instead
// of the legacy default stream; a free picks uniformly among the live blocks
// (RMM's index draw has a slight modulo bias); the random numbers are drawn
// before timing, not inside the loop.
//
// Counters: ops (per second: allocations + frees), peak_req_MiB (most bytes
// live at once in the trace: what any allocator must hold at least), and where
// the allocator can tell its figures (reset_peaks/read_peaks, see
// allocators.hpp): peak_res_MiB (its reserved high-water mark over the warm-up
// replay and the timed ones) and res_over_req = peak reserved / peak
// requested, the memory overhead of its placement. Before the warm-up replay
// the allocator is trimmed (nothing cached) and its highs are reset; after the
// case it is trimmed again, so later cases do not inherit gigabytes.
//
// On the host simulation (1 GiB device) the cap is kSimCapMiB and N at most
// kSimAllocs; the label says so.
//
// A header so that sova_bench (random_allocs.cpp) and sova_bench_torch share it.
#pragma once

#include "cases.hpp"

#include <sova/pool.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sova_bench {

inline constexpr std::size_t kRandomCapMiB = 16000;  // RMM's max_usage
inline constexpr std::size_t kSimCapMiB = 384;
inline constexpr std::size_t kSimAllocs = 2000;

struct RandomOp {
  std::uint32_t slot;   ///< index into the replay's table of live pointers
  std::uint32_t bytes;  ///< bytes to allocate into `slot`; 0 = free `slot`
};

struct RandomTrace {
  std::vector<RandomOp> ops;
  std::size_t slots = 0;           ///< most blocks live at once
  std::size_t peak_requested = 0;  ///< most bytes live at once
  std::size_t allocations = 0;
};

/// random_allocs.cpp. `max_bytes` < 4 GiB.
RandomTrace make_random_trace(std::size_t allocations, std::size_t max_bytes, std::size_t cap_bytes);

/// Replays `trace` once on `stream` and waits for it. On an exception, frees
/// what the replay still holds before rethrowing.
template <class A>
void replay_random(A& a, const RandomTrace& trace, const Stream& stream, std::vector<void*>& slots) {
  try {
    for (const RandomOp& op : trace.ops) {
      if (op.bytes != 0) {
        slots[op.slot] = a.allocate(op.bytes, stream.get());
      } else {
        a.deallocate(slots[op.slot], stream.get());
        slots[op.slot] = nullptr;
      }
    }
    stream.sync();
  } catch (...) {
    for (void*& p : slots) {
      if (p == nullptr) continue;
      try {
        a.deallocate(p, stream.get());
      } catch (...) {
      }
      p = nullptr;
    }
    throw;
  }
}

template <class A>
inline constexpr bool kHasPeaks = requires(A& a) {
  a.reset_peaks();
  { a.read_peaks() } -> std::same_as<PeakFigures>;
};

/// Allocators that are a sova::Pool (SovaPool and its variants).
template <class A>
inline constexpr bool kHasSovaPool = requires(A& a) {
  { a.pool->stats() } -> std::same_as<sova::PoolStats>;
};

/// A sova pool's remapping work counters (zero for other allocators).
struct RemapWork {
  std::uint64_t moves = 0;    ///< chunks remapped
  std::uint64_t creates = 0;  ///< chunks created
  std::uint64_t waits = 0;    ///< remap_waits
  RemapWork operator-(const RemapWork& o) const { return {moves - o.moves, creates - o.creates, waits - o.waits}; }
};
template <class A>
RemapWork remap_work_of(A& a) {
  if constexpr (kHasSovaPool<A>) {
    const sova::PoolStats st = a.pool->stats();
    return {st.chunks_remapped, st.chunks_mapped, st.remap_waits};
  } else {
    return {};
  }
}

/// The `moves`, `creates` and `waits` counters: `work` (over the timed
/// iterations) per iteration.
inline void report_remap_work(benchmark::State& state, const RemapWork& work) {
  const auto per_iteration = [&state](std::uint64_t count) {
    return benchmark::Counter(static_cast<double>(count) / static_cast<double>(state.iterations()));
  };
  state.counters["moves"] = per_iteration(work.moves);
  state.counters["creates"] = per_iteration(work.creates);
  state.counters["waits"] = per_iteration(work.waits);
}

template <class A>
void BM_random(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    constexpr double kMiB = 1024.0 * 1024.0;
    const auto max_bytes = static_cast<std::size_t>(state.range(0)) << 20;
    auto allocations = static_cast<std::size_t>(state.range(1));
    std::size_t cap = kRandomCapMiB << 20;
    if (a.sim != nullptr) {
      allocations = allocations < kSimAllocs ? allocations : kSimAllocs;
      cap = kSimCapMiB << 20;
      state.SetLabel(std::string(a.label) + " (" + std::to_string(allocations) + " allocs, cap " +
                     std::to_string(kSimCapMiB) + " MiB)");
    }
    const RandomTrace trace = make_random_trace(allocations, max_bytes, cap);
    Stream stream(a.sim);
    std::vector<void*> slots(trace.slots, nullptr);
    if constexpr (kHasPeaks<A>) a.reset_peaks();
    replay_random(a, trace, stream, slots);  // warm: the allocator grows to what the trace needs
    const RemapWork work_before = remap_work_of(a);
    for (auto _ : state) replay_random(a, trace, stream, slots);
    state.counters["ops"] = benchmark::Counter(
        static_cast<double>(state.iterations()) * static_cast<double>(trace.ops.size()), benchmark::Counter::kIsRate);
    state.counters["peak_req_MiB"] = benchmark::Counter(static_cast<double>(trace.peak_requested) / kMiB);
    if constexpr (kHasPeaks<A>) {
      const PeakFigures peaks = a.read_peaks();
      state.counters["peak_res_MiB"] = benchmark::Counter(static_cast<double>(peaks.reserved_high) / kMiB);
      if (trace.peak_requested != 0) {
        state.counters["res_over_req"] =
            benchmark::Counter(static_cast<double>(peaks.reserved_high) / static_cast<double>(trace.peak_requested));
      }
      a.reset_peaks();  // give the memory back for the cases after this one
    }
    // Remapping's work a replay (random sizes move chunks more than any
    // trace: the figures say whether a slow run is the driver's).
    if constexpr (kHasSovaPool<A>) report_remap_work(state, remap_work_of(a) - work_before);
  });
}

/// Registers random/<A::kName>/max_mib:{1,4,64,256}/allocs:N (wall time, ms).
template <class A>
benchmark::internal::Benchmark* register_random(long allocations) {
  auto* b = benchmark::RegisterBenchmark(case_name<A>("random").c_str(), BM_random<A>);
  b->ArgNames({"max_mib", "allocs"});
  for (long max_mib : {1L, 4L, 64L, 256L}) b->Args({max_mib, allocations});
  return b->UseRealTime()->Unit(benchmark::kMillisecond);
}

}  // namespace sova_bench
