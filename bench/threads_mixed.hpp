// threads_mixed/<allocator>/classes:C/threads:T: T host threads, each with
// its own stream, each holding a window of kMixedWindow live blocks of mixed
// sizes; an iteration frees a random block of its window and allocates one of
// a random size in its place (a pair). Sizes are 256 B + k x 4 KiB, k uniform
// in [0, C): C = 16 (256 B to 61 KiB) or 64 (to 253 KiB). The "pairs" counter
// is the aggregate rate of all threads (wall time, UseRealTime).
//
// What threads/ does not show: with one size per iteration every allocation
// finds the block just freed; here each allocation wants a size that may
// be live, cached, or gone to the heap, as in a framework's allocations, and
// the threads' blocks meet in the pool's shared heap (16 threads once
// collapsed to 12 M pairs/s here while threads/ gave 80-110 M).
// The random choices are drawn before timing (kMixedSchedule per thread).
//
// A header so that sova_bench and the peers' programs share the loop.
#pragma once

#include "cases.hpp"

#include <array>
#include <random>
#include <vector>

namespace sova_bench {

inline constexpr std::size_t kMixedWindow = 8;
inline constexpr std::size_t kMixedSchedule = 4096;

template <class A>
void BM_threads_mixed(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    const auto classes = static_cast<std::size_t>(state.range(0));
    Stream stream(a.sim);
    struct Step {
      std::uint32_t slot;
      std::uint32_t bytes;
    };
    std::vector<Step> schedule(kMixedSchedule);
    std::mt19937 rng(1234u + static_cast<unsigned>(state.thread_index()));
    for (Step& s : schedule) {
      s.slot = static_cast<std::uint32_t>(rng() % kMixedWindow);
      s.bytes = static_cast<std::uint32_t>(256 + (rng() % classes) * 4096);
    }
    std::array<void*, kMixedWindow> live{};
    for (std::size_t i = 0; i < kMixedWindow; ++i) live[i] = a.allocate(schedule[i].bytes, stream.get());
    // No benchmark::DoNotOptimize(live[s.slot]): the pointer escapes to a
    // deallocate anyway, and GCC 12 with Google Benchmark 1.7's
    // DoNotOptimize(T&) (an asm "+m,r" operand) dropped the store into
    // live[s.slot] where operator[] is bounds-checked (_GLIBCXX_ASSERTIONS):
    // live[] kept the freed pointer, and the slot's next free was a double
    // free, on every allocator (bench/tests/test_threads_mixed.cpp).
    auto step = [&](const Step& s) {
      a.deallocate(live[s.slot], stream.get());
      live[s.slot] = a.allocate(s.bytes, stream.get());
    };
    for (const Step& s : schedule) step(s);  // warm-up: one pass of the schedule
    // A sova pool's own account of the timed loop (summed over threads: the
    // pool is shared): which path served the allocations, and driver work.
    sova::PoolStats before{};
    constexpr bool kHasPoolStats = requires { a.pool_stats(); };
    if constexpr (kHasPoolStats) before = a.pool_stats();
    std::size_t next = 0;
    for (auto _ : state) {
      step(schedule[next]);
      if (++next == kMixedSchedule) next = 0;
    }
    if constexpr (kHasPoolStats) {
      if (state.thread_index() == 0) {
        const sova::PoolStats after = a.pool_stats();
        const auto per_pair = [&](std::uint64_t now, std::uint64_t then) {
          return benchmark::Counter(static_cast<double>(now - then) / static_cast<double>(state.iterations()));
        };
        state.counters["slow_per_pair"] =
            per_pair(after.allocations - after.fast_path_hits, before.allocations - before.fast_path_hits);
        state.counters["grown_per_pair"] = per_pair(after.slow_grown, before.slow_grown);
        // Host time in the slow path (an estimate, PoolStats), all threads' misses.
        const auto slow_ns = [](const sova::PoolStats& s) {
          return s.slow_from_heap_ns + s.slow_from_heap_all_ns + s.slow_from_other_streams_ns + s.slow_with_wait_ns +
                 s.slow_grown_ns + s.slow_after_synchronize_ns;
        };
        state.counters["slow_ns_per_pair"] = per_pair(slow_ns(after), slow_ns(before));
        // What the pool knows of streams: each run of a case makes new ones.
        state.counters["stream_states"] = static_cast<double>(after.stream_states);
        state.counters["active_streams"] = static_cast<double>(after.active_streams);
        state.counters["reserved_MiB"] = static_cast<double>(after.reserved_current) / (1 << 20);
        // Cached by the previous runs' streams, until their frees are known complete.
        state.counters["stranded_MiB"] = static_cast<double>(after.stranded_bytes) / (1 << 20);
        state.counters["heap_ns_per_pair"] = per_pair(after.slow_from_heap_ns, before.slow_from_heap_ns);
        state.counters["others_ns_per_pair"] =
            per_pair(after.slow_from_other_streams_ns + after.slow_with_wait_ns + after.slow_from_heap_all_ns,
                     before.slow_from_other_streams_ns + before.slow_with_wait_ns + before.slow_from_heap_all_ns);
        // A miss that flushed the stream's kept blocks too (heap_all) empties
        // its cache: the next few dozen allocations miss (a miss storm).
        state.counters["heap_all_per_pair"] = per_pair(after.slow_from_heap_all, before.slow_from_heap_all);
        state.counters["events_per_pair"] = per_pair(after.events_recorded, before.events_recorded);
        state.counters["driver_work_per_pair"] =
            per_pair(after.chunks_mapped + after.chunks_remapped + after.chunks_unmapped + after.remap_waits +
                         after.device_synchronizes + after.cross_stream_waits,
                     before.chunks_mapped + before.chunks_remapped + before.chunks_unmapped + before.remap_waits +
                         before.device_synchronizes + before.cross_stream_waits);
      }
    }
    for (void* p : live) a.deallocate(p, stream.get());
    stream.sync();
    state.counters["pairs"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  });
}

/// Registers threads_mixed/<A::kName>/classes:{16,64}/threads:{1,2,4,8,16}.
template <class A>
benchmark::internal::Benchmark* register_threads_mixed() {
  return benchmark::RegisterBenchmark(case_name<A>("threads_mixed").c_str(), BM_threads_mixed<A>)
      ->ArgName("classes")
      ->Arg(16)
      ->Arg(64)
      ->Threads(1)
      ->Threads(2)
      ->Threads(4)
      ->Threads(8)
      ->Threads(16)
      ->UseRealTime()
      ->Unit(benchmark::kNanosecond);
}

}  // namespace sova_bench
