// multistream/<allocator>/random_sizes:{0,1} — the target that cross-stream reuse
// must not serialize streams (RMM's pool does: rmm#850). Target: total time
// within 10% of preallocated buffers.
//
// The loop (one "multistream loop"): 4 streams, one host thread visiting them
// round-robin; kRounds rounds; in each round, on each stream: allocate two
// temporaries (1-16 MiB), launch a kernel that writes a tag into them, runs
// for kKernelMicroseconds and checks the tag, then free both on that stream.
// The host clock runs from the first allocation to the end of the synchronize
// of all four streams. Kernels are small (8 blocks), so the four streams run
// side by side: the floor is about kRounds x kKernelMicroseconds, and an
// allocator that makes one stream wait for another (or, like cudaFree, for the
// device) stretches it towards 4x that.
//
// Why one host thread, not four: what is measured is the GPU-side ordering an
// allocator inserts between streams, not host lock contention (threads/
// measures that). One thread gives the same sequence of allocator calls on
// every run and for every allocator (the shape of RMM's own
// multi_stream_allocations benchmark), and one clock around the whole loop.
// The host enqueues far ahead of the GPU (about 400 allocator calls and 100
// launches against ~5 ms of kernels), so unless an allocator spends >10 us a
// call, the loop time is the GPU's.
//
// Sizes: random_sizes:0 cycles a few fixed sizes (1, 2, 4, 8, 16 MiB), so
// that after the warm-up every stream can be served from blocks of exactly
// that size it freed itself; random_sizes:1 draws every size afresh (uniform in
// 1-16 MiB, 256 B steps, fixed seed: the same sizes on every run), so exact
// caches miss and the allocator must split, merge and take memory other
// streams freed — the path where a waiting-based reuse serializes streams.
//
// Each GB iteration runs the allocator's loop and, interleaved (the order
// alternates), the same loop on preallocated buffers (one per stream and
// temporary, 16 MiB each). Reported time (manual): the allocator's loop.
// Counters: vs_prealloc = sum of the allocator's loop times / sum of the
// floor's, measured side by side in the same case; floor_ms = the floor's mean
// loop time; for sova::Pool, per allocator loop, waits (cudaStreamWaitEvent
// inserted for cross-stream reuse), xreuse (blocks taken from another
// stream's frees) and syncs (device synchronizes). The kernels count tags read back wrong (memory handed to another
// stream while still in use): any is an error, and the case fails.
//
// A header so that sova_bench (multistream.cpp) and sova_bench_torch share it.
#pragma once

#include "cases.hpp"
#include "multistream_kernel.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <type_traits>

namespace sova_bench {

inline constexpr int kMsStreams = 4;
inline constexpr int kMsRounds = 25;  // per stream: 100 kernels a loop
inline constexpr std::uint64_t kKernelMicroseconds = 200;
inline constexpr std::size_t kMsMaxBytes = std::size_t{16} << 20;

/// The sizes of every temporary of one loop, indexed [round][stream][temp].
struct MultiStreamPlan {
  std::size_t bytes[kMsRounds][kMsStreams][kMsTemps];
};
/// random_sizes false: kFixed sizes cycling; true: uniform 1-16 MiB, fixed seed.
const MultiStreamPlan& multistream_plan(bool random_sizes);

/// The streams, the floor's preallocated buffers and the kernel, in either
/// world: CUDA (sim == nullptr) or sova's host simulation, where the "kernel"
/// is host work on the sim stream (tags written, a sleep, tags checked).
/// Throws std::runtime_error when it cannot be set up (or, on CUDA, when the
/// program was built without kernels).
class MultiStreamRig {
 public:
  explicit MultiStreamRig(sova::SimDriver* sim);
  ~MultiStreamRig();  // waits for the streams, frees the buffers
  MultiStreamRig(const MultiStreamRig&) = delete;
  MultiStreamRig& operator=(const MultiStreamRig&) = delete;

  cudaStream_t stream(int s) const { return streams_[static_cast<std::size_t>(s)]->get(); }
  /// The floor's buffer for temporary t on stream s (kMsMaxBytes).
  void* floor(int s, int t) const { return floor_[static_cast<std::size_t>(s * kMsTemps + t)]; }
  /// Enqueues the kernel on stream s over kMsTemps temporaries.
  void launch(int s, void* const* temps, const std::size_t* bytes, std::uint32_t tag);
  /// Waits for all four streams; throws on an error (a failed launch included).
  void sync();
  /// Tags read back wrong so far (waits for the streams).
  std::uint64_t errors();

 private:
  sova::SimDriver* sim_;
  std::array<std::unique_ptr<Stream>, kMsStreams> streams_;
  std::array<void*, kMsStreams * kMsTemps> floor_{};
  unsigned long long* device_errors_ = nullptr;  // CUDA world
  std::atomic<std::uint64_t> sim_errors_{0};     // sim world
};

/// One multistream loop: returns its wall time in seconds (first allocation to
/// the end of the synchronize). alloc(s, t, bytes) -> void*, release(s, t, p).
/// `epoch` goes into the tags, so a block still holding an older loop's tag
/// (or another stream's) reads back wrong.
template <class Alloc, class Release>
double run_multistream(MultiStreamRig& rig, const MultiStreamPlan& plan, std::uint32_t epoch, Alloc&& alloc,
                       Release&& release) {
  rig.sync();
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < kMsRounds; ++r) {
    for (int s = 0; s < kMsStreams; ++s) {
      void* temps[kMsTemps];
      for (int t = 0; t < kMsTemps; ++t) temps[t] = alloc(s, t, plan.bytes[r][s][t]);
      rig.launch(s, temps, plan.bytes[r][s], (epoch << 16) ^ static_cast<std::uint32_t>((r << 4) | s));
      for (int t = 0; t < kMsTemps; ++t) release(s, t, temps[t]);
    }
  }
  rig.sync();
  return seconds_since(start);
}

/// The floor as a case of its own: multistream/preallocated (CUDA) and
/// multistream/preallocated_sim. Its vs_prealloc compares the floor with
/// itself, measured side by side: the noise of the measurement.
struct MultiStreamFloor {
  static constexpr const char* kName = "preallocated";
  std::string why_not;
  const char* label = "cuda";
  sova::SimDriver* sim = nullptr;
  MultiStreamFloor() {
    if (!have_gpu()) why_not = "no GPU";
  }
};
struct MultiStreamFloorSim {
  static constexpr const char* kName = "preallocated_sim";
  std::string why_not;
  const char* label = "sim";
  sova::SimDriver* sim = &shared_sim();
};

template <class A>
inline constexpr bool kIsMultiStreamFloor =
    std::is_same_v<A, MultiStreamFloor> || std::is_same_v<A, MultiStreamFloorSim>;

template <class A>
void BM_multistream(benchmark::State& state) {
  run_case<A>(state, [&state](A& a) {
    const MultiStreamPlan& plan = multistream_plan(state.range(0) != 0);
    MultiStreamRig rig(a.sim);
    auto floor_alloc = [&rig](int s, int t, std::size_t) { return rig.floor(s, t); };
    auto floor_release = [](int, int, void*) {};
    auto run_allocator = [&](std::uint32_t epoch) {
      if constexpr (kIsMultiStreamFloor<A>) {
        return run_multistream(rig, plan, epoch, floor_alloc, floor_release);
      } else {
        return run_multistream(
            rig, plan, epoch, [&a, &rig](int s, int, std::size_t bytes) { return a.allocate(bytes, rig.stream(s)); },
            [&a, &rig](int s, int, void* p) { a.deallocate(p, rig.stream(s)); });
      }
    };
    auto run_floor = [&](std::uint32_t epoch) { return run_multistream(rig, plan, epoch, floor_alloc, floor_release); };

    std::uint32_t epoch = 1;
    run_allocator(epoch++);  // warm: the allocator holds what the loop needs
    run_floor(epoch++);
    constexpr bool kHasPoolStats = requires(A & x) { x.pool_stats(); };
    sova::PoolStats before{};
    if constexpr (kHasPoolStats) before = a.pool_stats();
    double total = 0;
    double floor_total = 0;
    bool floor_first = false;
    for (auto _ : state) {
      floor_first = !floor_first;  // alternate, so drift falls on both alike
      if (floor_first) floor_total += run_floor(epoch++);
      const double seconds = run_allocator(epoch++);
      if (!floor_first) floor_total += run_floor(epoch++);
      state.SetIterationTime(seconds);
      total += seconds;
    }
    const std::uint64_t errors = rig.errors();
    if (errors != 0) {
      throw std::runtime_error("kernels read back " + std::to_string(errors) +
                               " wrong tags: a temporary was reused while a kernel still used it");
    }
    const auto iterations = static_cast<double>(state.iterations());
    if (floor_total > 0) state.counters["vs_prealloc"] = benchmark::Counter(total / floor_total);
    if (iterations > 0) state.counters["floor_ms"] = benchmark::Counter(floor_total / iterations * 1e3);
    if constexpr (kHasPoolStats) {
      const sova::PoolStats after = a.pool_stats();
      auto per_loop = [iterations](std::uint64_t from, std::uint64_t to) {
        return benchmark::Counter(iterations > 0 ? static_cast<double>(to - from) / iterations : 0.0);
      };
      state.counters["waits"] = per_loop(before.cross_stream_waits, after.cross_stream_waits);
      state.counters["xreuse"] = per_loop(before.cross_stream_reuses, after.cross_stream_reuses);
      state.counters["syncs"] = per_loop(before.device_synchronizes, after.device_synchronizes);
      state.counters["maps"] = per_loop(before.chunks_mapped, after.chunks_mapped);
      state.counters["events"] = per_loop(before.events_recorded, after.events_recorded);
      state.counters["hits"] = per_loop(before.fast_path_hits, after.fast_path_hits);
    }
  });
}

/// Registers multistream/<A::kName>/random_sizes:{0,1} (manual time, ms).
template <class A>
benchmark::internal::Benchmark* register_multistream() {
  return benchmark::RegisterBenchmark(case_name<A>("multistream").c_str(), BM_multistream<A>)
      ->ArgName("random_sizes")
      ->Arg(0)
      ->Arg(1)
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}

}  // namespace sova_bench
