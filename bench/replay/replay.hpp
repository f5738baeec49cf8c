// replay/<trace>/<allocator> — recorded allocation traces replayed on each
// allocator. A trace is a file in RMM's replay log format
// (trace.hpp), found in the trace directory (catalog.hpp); PyTorch training
// runs are recorded and converted by tools/traces/ (docs/benchmarks.md).
//
// One iteration replays the whole trace: every allocation and free in trace
// order, each on the stream its row names (streams.hpp: trace stream 0 is the
// legacy default stream, others are streams made for the case), no kernels,
// then a synchronize of every stream (timed). Before the first, untimed
// replay the allocator is trimmed and its highs are reset (as in random/), so
// the peaks are what this trace costs it; after the case it is trimmed again.
//
// Counters: ops (allocations and frees per second, the throughput), events
// (operations per replay), peak_req_MiB (most bytes live at once in the
// trace: what any allocator must hold at least), and the allocator's own
// high-water marks (read_peaks): peak_used_MiB (bytes handed out),
// peak_res_MiB (memory held), res_over_used = peak reserved / peak used (the
// ratio asked of every allocator: its placement's cost over what it counts
// as handed out; left out when peak used reads 0) and res_over_req = peak
// reserved / peak_req (the same over the trace's own floor, which every
// allocator shares: the one to compare allocators by, since sova's peak used
// is only a lower bound when a trace uses several streams, docs/design.md
// "Statistics"). For sova's pools also, per timed replay: moves (free
// chunks remapped), creates (chunks created) and waits (the allocating
// stream synchronized so that its own frees' chunks could move): the driver
// work that remapping costs once the layout has settled; and which path
// served the timed replays' allocations (PoolStats' slow-path counters):
// fast_share (the stream's cache), heap_share (best fit in free memory),
// other_share (other streams' frees, waited for or not), grown_share
// (memory created or remapped, or after a synchronize).
// For every allocator: cold_ms, the first (untimed) replay's wall time, in
// which the allocator grows to what the trace needs; alloc_p50_ns /
// alloc_p99_ns / alloc_max_ns, single allocate calls timed one by one over one
// more steady replay after the timed ones (each figure includes a clock read).
//
// Refused, as a skipped case with the reason: a trace that does not parse; a
// trace with frees of pointers it never allocated (unknown_frees, counted and
// named in the message: the trace does not say what they freed, so its
// memory figures would be wrong); on the host simulation, a trace needing
// more than kSimCapMiB live (the sim device has 1 GiB).
//
// Memory over time (timeline.hpp) is sampled in the first warm-up replay of
// each pair when asked for, for allocators with memory_now (memory_now.hpp).
//
// A header so that sova_bench (replay.cpp) and sova_bench_torch share it.
#pragma once

#include "../random_allocs.hpp"  // kHasPeaks, kSimCapMiB, run_case
#include "catalog.hpp"
#include "memory_now.hpp"
#include "streams.hpp"
#include "timeline.hpp"
#include "trace.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sova_bench {

template <class A>
inline constexpr bool kHasMemoryNow = requires(A& a) {
  { memory_now(a) } -> std::same_as<MemoryNow>;
};

/// Issues the trace's operations on `a`; `slots` has trace.slots entries.
template <class A>
void replay_ops(A& a, const Trace& trace, const ReplayStreams& streams, std::vector<void*>& slots) {
  for (const TraceOp& op : trace.ops) {
    if (op.bytes != 0) {
      slots[op.slot] = a.allocate(op.bytes, streams[op.stream]);
    } else {
      a.deallocate(slots[op.slot], streams[op.stream]);
      slots[op.slot] = nullptr;
    }
  }
}

/// The same, reading memory_now(a) before the first operation, every
/// timeline_every() operations and after the last.
template <class A>
std::vector<TimelineSample> replay_ops_sampled(A& a, const Trace& trace, const ReplayStreams& streams,
                                               std::vector<void*>& slots) {
  const std::size_t every = timeline_every(trace.ops.size());
  std::vector<std::uint64_t> slot_bytes(trace.slots, 0);
  std::vector<TimelineSample> samples;
  samples.reserve(trace.ops.size() / every + 2);
  std::uint64_t live = 0;
  samples.push_back({0, 0, memory_now(a)});
  for (std::size_t i = 0; i < trace.ops.size(); ++i) {
    const TraceOp& op = trace.ops[i];
    if (op.bytes != 0) {
      slots[op.slot] = a.allocate(op.bytes, streams[op.stream]);
      slot_bytes[op.slot] = op.bytes;
      live += op.bytes;
    } else {
      a.deallocate(slots[op.slot], streams[op.stream]);
      slots[op.slot] = nullptr;
      live -= slot_bytes[op.slot];
    }
    if ((i + 1) % every == 0 || i + 1 == trace.ops.size()) samples.push_back({i + 1, live, memory_now(a)});
  }
  return samples;
}

/// One replay and the synchronize of its streams; with `samples`, the
/// sampled replay. On an exception, frees what the replay still holds
/// before rethrowing.
template <class A>
void replay_once(A& a, const Trace& trace, const ReplayStreams& streams, std::vector<void*>& slots,
                 std::vector<TimelineSample>* samples) {
  try {
    if constexpr (kHasMemoryNow<A>) {
      if (samples != nullptr) {
        *samples = replay_ops_sampled(a, trace, streams, slots);
      } else {
        replay_ops(a, trace, streams, slots);
      }
    } else {
      replay_ops(a, trace, streams, slots);
    }
    streams.sync();
  } catch (...) {
    for (void*& p : slots) {
      if (p == nullptr) continue;
      try {
        a.deallocate(p, streams[0]);
      } catch (...) {
      }
      p = nullptr;
    }
    throw;
  }
}

/// Throws std::runtime_error (the case's skip message) when `trace` must not
/// be replayed on `a` (see the top of this file).
template <class A>
void check_replayable(const A& a, const Trace& trace) {
  if (trace.unknown_frees != 0) {
    throw std::runtime_error("not replayed: " + std::to_string(trace.unknown_frees) +
                             " frees of pointers the trace never allocated (first: " + trace.first_unknown_free + ")");
  }
  if (trace.allocations == 0) throw std::runtime_error("not replayed: the trace allocates nothing");
  if (a.sim != nullptr && trace.peak_requested > (kSimCapMiB << 20)) {
    throw std::runtime_error("not replayed on the host simulation: the trace needs " +
                             std::to_string(trace.peak_requested >> 20) + " MiB live, over its cap of " +
                             std::to_string(kSimCapMiB) + " MiB");
  }
}

/// Allocation latency over one replay: allocate calls timed one by one with
/// the steady clock (its read, ~36-50 ns on the H100's host, is inside every
/// figure). Percentiles in ns.
struct LatencyFigures {
  double p50 = 0, p99 = 0, max = 0;
};
template <class A>
LatencyFigures replay_latencies(A& a, const Trace& trace, const ReplayStreams& streams, std::vector<void*>& slots) {
  std::vector<std::int64_t> ns;
  ns.reserve(trace.allocations);
  for (const TraceOp& op : trace.ops) {
    if (op.bytes != 0) {
      const auto start = std::chrono::steady_clock::now();
      slots[op.slot] = a.allocate(op.bytes, streams[op.stream]);
      ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    } else {
      a.deallocate(slots[op.slot], streams[op.stream]);
      slots[op.slot] = nullptr;
    }
  }
  streams.sync();
  std::sort(ns.begin(), ns.end());
  if (ns.empty()) return {};
  auto at = [&](double q) {
    return static_cast<double>(ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))]);
  };
  return {at(0.50), at(0.99), static_cast<double>(ns.back())};
}

/// Which path served a sova pool's allocations (PoolStats): the fast path
/// and each step of the slow path, as shares of the allocations.
struct PathCounts {
  std::uint64_t allocations = 0, fast = 0, heap = 0, heap_all = 0, other_streams = 0, wait = 0, grown = 0, sync = 0;
  PathCounts operator-(const PathCounts& o) const {
    return {allocations - o.allocations,     fast - o.fast, heap - o.heap,   heap_all - o.heap_all,
            other_streams - o.other_streams, wait - o.wait, grown - o.grown, sync - o.sync};
  }
};
template <class A>
PathCounts path_counts_of(A& a) {
  if constexpr (kHasSovaPool<A>) {
    const sova::PoolStats st = a.pool->stats();
    return {st.allocations,        st.fast_path_hits,          st.slow_from_heap,
            st.slow_from_heap_all, st.slow_from_other_streams, st.slow_with_wait,
            st.slow_grown,         st.slow_after_synchronize};
  } else {
    return {};
  }
}

template <class A>
void BM_replay(benchmark::State& state, const TraceFile& file) {
  run_case<A>(state, [&state, &file](A& a) {
    constexpr double kMiB = 1024.0 * 1024.0;
    const Trace& trace = cached_trace(file);
    check_replayable(a, trace);
    const ReplayStreams streams(a.sim, trace.streams);
    std::vector<void*> slots(trace.slots, nullptr);
    a.reset_peaks();
    const bool sample = kHasMemoryNow<A> && timeline_wanted(file.name, A::kName);
    std::vector<TimelineSample> samples;
    const auto cold_start = std::chrono::steady_clock::now();
    replay_once(a, trace, streams, slots, sample ? &samples : nullptr);  // warm: grows to what the trace needs
    const double cold_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cold_start).count();
    if (sample) timeline_write(file.name, A::kName, a.label, samples);
    const RemapWork work_before = remap_work_of(a);
    const PathCounts paths_before = path_counts_of(a);
    for (auto _ : state) replay_once(a, trace, streams, slots, nullptr);
    const PathCounts paths = path_counts_of(a) - paths_before;
    // The first replay apart (it creates what the trace needs), and the
    // latency of single allocations over one more, steady replay.
    state.counters["cold_ms"] = benchmark::Counter(cold_ms);
    const LatencyFigures latency = replay_latencies(a, trace, streams, slots);
    state.counters["alloc_p50_ns"] = benchmark::Counter(latency.p50);
    state.counters["alloc_p99_ns"] = benchmark::Counter(latency.p99);
    state.counters["alloc_max_ns"] = benchmark::Counter(latency.max);
    if constexpr (kHasSovaPool<A>) {
      // Which path served the timed replays' allocations.
      const auto share = [&paths](std::uint64_t count) {
        return benchmark::Counter(
            paths.allocations == 0 ? 0.0 : static_cast<double>(count) / static_cast<double>(paths.allocations));
      };
      state.counters["fast_share"] = share(paths.fast);
      state.counters["heap_share"] = share(paths.heap + paths.heap_all);
      state.counters["other_share"] = share(paths.other_streams + paths.wait);
      state.counters["grown_share"] = share(paths.grown + paths.sync);
    }
    // What a replay costs sova in driver work, once the layout has settled.
    if constexpr (kHasSovaPool<A>) report_remap_work(state, remap_work_of(a) - work_before);

    const auto ops = static_cast<double>(trace.ops.size());
    state.counters["ops"] =
        benchmark::Counter(static_cast<double>(state.iterations()) * ops, benchmark::Counter::kIsRate);
    state.counters["events"] = benchmark::Counter(ops);
    state.counters["peak_req_MiB"] = benchmark::Counter(static_cast<double>(trace.peak_requested) / kMiB);
    const PeakFigures peaks = a.read_peaks();
    const auto reserved = static_cast<double>(peaks.reserved_high);
    state.counters["peak_res_MiB"] = benchmark::Counter(reserved / kMiB);
    state.counters["peak_used_MiB"] = benchmark::Counter(static_cast<double>(peaks.used_high) / kMiB);
    if (peaks.used_high != 0) {
      state.counters["res_over_used"] = benchmark::Counter(reserved / static_cast<double>(peaks.used_high));
    }
    state.counters["res_over_req"] = benchmark::Counter(reserved / static_cast<double>(trace.peak_requested));
    a.reset_peaks();  // give the memory back for the cases after this one
  });
}

/// Registers replay/<trace>/<A::kName> for each trace (wall time, ms).
template <class A>
void register_replay(const std::vector<TraceFile>& traces) {
  static_assert(kHasPeaks<A>, "replay/ reports peak memory: A needs reset_peaks and read_peaks");
  for (const TraceFile& file : traces) {
    benchmark::RegisterBenchmark(("replay/" + file.name + "/" + A::kName).c_str(),
                                 [file](benchmark::State& state) { BM_replay<A>(state, file); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

/// sova_bench's replay cases (replay.cpp): takes the replay's flags out of
/// argv (catalog.hpp), then registers replay/ for sova's and the CUDA
/// runtime's allocators. Call before benchmark::Initialize.
void register_replay_cases(int& argc, char** argv);

}  // namespace sova_bench
