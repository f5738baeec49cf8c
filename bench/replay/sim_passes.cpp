// sova_sim_passes: replays a trace several times on sova's host simulation and
// prints, after each pass, the pool's peak reserved memory over the trace's
// peak live bytes and what the pass cost in driver work (chunks created and
// remapped; the simulation's count of map, unmap and access calls, which on
// the GPU cost ~10-30 us each) and how many allocations its streams' caches
// served (the fast path). A tool for placement and remapping work (docs/policies.md): on
// the simulation a pass takes seconds, a GPU run minutes.
//
//   sova_sim_passes TRACE [--policy=default|size_classes|buddy|best_fit]
//                         [--no-remap] [--thorough] [--max-chunk=MiB]
//                         [--passes=N] [--idle | --lag-us=N] [--device-gib=N]
//                         [--placements=FILE] [--timed-passes=N]
//
// --placements=FILE writes, for every allocation of every pass, the offset
// of the pointer from the first pointer the pool handed out (one per line):
// two builds place identically when their files are identical (--idle makes
// the placements deterministic). --timed-passes=N replays N more passes after
// the reported ones and prints the host time per event (allocations and
// frees) over them: the steady state, on the host and the simulation's driver.
//
// --thorough: RemapEffort::thorough (include/sova/pool.hpp).
//
// --idle tells the pool after every operation that the stream's work is
// complete (Pool::stream_synchronized), as a GPU without kernels would show
// it: the figures are then deterministic, and matched the H100's replay of the
// same traces within 0.002 with one-granule chunks. Without it they depend on
// when the simulation's stream threads complete the pool's fences.
//
// --lag-us=N follows every allocation with N us of device work on its stream
// (SimDriver::delay, in real time), as the kernels that use it would: the
// host runs ahead of the device, as under PyTorch, so a stream's recent frees
// are pending when the pool looks, and a wait for them takes time. Each pass
// then prints the host's time for it and the pool's waits.
// The simulation backs memory with untouched memfd pages: no host memory is
// used for the trace's bytes.
#include "trace.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Options {
  std::string trace;
  sova::Policy policy = sova::Policy::default_policy;
  bool remap = true;
  sova::RemapEffort effort = sova::RemapEffort::balanced;
  std::size_t max_chunk = sova::PoolOptions{}.max_chunk;
  int passes = 3;
  bool idle = false;
  int lag_us = 0;
  std::size_t device_bytes = std::size_t{80} << 30;
  std::string placements;
  int timed_passes = 0;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const std::string_view arg(a);
    if (arg.starts_with("--policy=")) {
      const std::string p = a + 9;
      if (p == "default")
        o.policy = sova::Policy::default_policy;
      else if (p == "size_classes")
        o.policy = sova::Policy::size_classes;
      else if (p == "buddy")
        o.policy = sova::Policy::buddy;
      else if (p == "best_fit")
        o.policy = sova::Policy::best_fit;
      else
        return false;
    } else if (std::strcmp(a, "--no-remap") == 0) {
      o.remap = false;
    } else if (std::strcmp(a, "--thorough") == 0) {
      o.effort = sova::RemapEffort::thorough;
    } else if (arg.starts_with("--max-chunk=")) {
      o.max_chunk = std::size_t(std::strtoull(a + 12, nullptr, 10)) << 20;
    } else if (arg.starts_with("--passes=")) {
      o.passes = std::atoi(a + 9);
    } else if (std::strcmp(a, "--idle") == 0) {
      o.idle = true;
    } else if (arg.starts_with("--lag-us=")) {
      o.lag_us = std::atoi(a + 9);
    } else if (arg.starts_with("--device-gib=")) {
      o.device_bytes = std::size_t(std::strtoull(a + 13, nullptr, 10)) << 30;
    } else if (arg.starts_with("--placements=")) {
      o.placements = a + 13;
    } else if (arg.starts_with("--timed-passes=")) {
      o.timed_passes = std::atoi(a + 15);
    } else if (a[0] != '-' && o.trace.empty()) {
      o.trace = a;
    } else {
      return false;
    }
  }
  return !o.trace.empty() && o.passes > 0 && o.lag_us >= 0 && !(o.idle && o.lag_us != 0);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s TRACE [--policy=default|size_classes|buddy|best_fit] [--no-remap] "
                 "[--thorough] [--max-chunk=MiB] [--passes=N] [--idle | --lag-us=N] [--device-gib=N] "
                 "[--placements=FILE] [--timed-passes=N]\n",
                 argv[0]);
    return 2;
  }
  try {
    const sova_bench::Trace trace = sova_bench::load_trace(o.trace);
    if (trace.unknown_frees != 0) {
      std::fprintf(stderr, "%s: %zu frees of pointers never allocated (%s): not replayed\n", o.trace.c_str(),
                   trace.unknown_frees, trace.first_unknown_free.c_str());
      return 1;
    }
    sova::SimConfig config;
    config.total_memory = o.device_bytes;
    sova::SimDriver sim(config);
    sova::PoolOptions options;
    options.driver = &sim;
    options.release_threshold = ~std::uint64_t{0};  // as the benchmarks: keep everything
    options.policy = o.policy;
    options.remap = o.remap;
    options.remap_effort = o.effort;
    options.max_chunk = o.max_chunk;
    sova::Pool pool(options);
    std::vector<cudaStream_t> streams;
    for (const std::uint64_t id : trace.streams) streams.push_back(id == 0 ? nullptr : sim.create_stream());
    std::vector<void*> slots(trace.slots, nullptr);
    std::FILE* placements = nullptr;
    if (!o.placements.empty() && (placements = std::fopen(o.placements.c_str(), "w")) == nullptr) {
      std::fprintf(stderr, "%s: cannot write\n", o.placements.c_str());
      return 1;
    }
    std::uintptr_t origin = 0;
    auto replay = [&](std::FILE* log) {
      for (const sova_bench::TraceOp& op : trace.ops) {
        cudaStream_t stream = streams[op.stream];
        if (op.bytes != 0) {
          slots[op.slot] = pool.allocate(op.bytes, stream);
          if (o.lag_us != 0) sim.delay(stream, std::chrono::microseconds(o.lag_us));
          if (log != nullptr) {
            const auto at = reinterpret_cast<std::uintptr_t>(slots[op.slot]);
            if (origin == 0) origin = at;
            std::fprintf(log, "%lld\n", static_cast<long long>(at - origin));
          }
        } else {
          pool.deallocate(slots[op.slot], stream);
          slots[op.slot] = nullptr;
        }
        if (o.idle) pool.stream_synchronized(stream);
      }
    };
    sova::PoolStats before = pool.stats();  // counters at the start of the pass
    sova::SimCounters driver_before = sim.counters();
    for (int pass = 0; pass < o.passes; ++pass) {
      const auto pass_start = std::chrono::steady_clock::now();
      replay(placements);
      const double host_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - pass_start).count();
      for (cudaStream_t s : streams) sim.stream_synchronize(s);
      const sova::PoolStats st = pool.stats();
      const sova::SimCounters driver = sim.counters();
      auto in_pass = [](std::uint64_t now, std::uint64_t then) { return static_cast<unsigned long long>(now - then); };
      std::printf(
          "pass %d: peak reserved %.0f MiB / trace peak %.0f MiB = %.3f; chunks created %llu, remapped %llu (to ghosts "
          "%llu); "
          "fast-path hits %llu of %llu allocations; released %llu, waits %llu; slow path: heap %llu, "
          "grown %llu, other %llu; driver: maps %llu, unmaps %llu, access %llu\n",
          pass, st.reserved_high / 1048576.0, trace.peak_requested / 1048576.0,
          static_cast<double>(st.reserved_high) / static_cast<double>(trace.peak_requested),
          in_pass(st.chunks_mapped, before.chunks_mapped), in_pass(st.chunks_remapped, before.chunks_remapped),
          in_pass(st.remaps_to_ghosts, before.remaps_to_ghosts), in_pass(st.fast_path_hits, before.fast_path_hits),
          in_pass(st.allocations, before.allocations), in_pass(st.chunks_unmapped, before.chunks_unmapped),
          in_pass(st.remap_waits, before.remap_waits),
          in_pass(st.slow_from_heap + st.slow_from_heap_all, before.slow_from_heap + before.slow_from_heap_all),
          in_pass(st.slow_grown + st.slow_after_synchronize, before.slow_grown + before.slow_after_synchronize),
          in_pass(st.slow_from_other_streams + st.slow_with_wait,
                  before.slow_from_other_streams + before.slow_with_wait),
          in_pass(driver.maps, driver_before.maps), in_pass(driver.unmaps, driver_before.unmaps),
          in_pass(driver.set_access_calls, driver_before.set_access_calls));
      if (o.lag_us != 0) {
        std::printf(
            "        host %.1f ms for the pass (device work %.1f ms); remapping waits %llu, device "
            "synchronizes %llu\n",
            host_ms, static_cast<double>(o.lag_us) * static_cast<double>(trace.allocations) / 1000.0,
            in_pass(st.remap_waits, before.remap_waits), in_pass(st.device_synchronizes, before.device_synchronizes));
      }
      before = st;
      driver_before = driver;
    }
    if (placements != nullptr) std::fclose(placements);
    if (o.timed_passes > 0) {
      const auto start = std::chrono::steady_clock::now();
      for (int pass = 0; pass < o.timed_passes; ++pass) replay(nullptr);
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
      const sova::PoolStats st = pool.stats();
      std::printf(
          "timed: %d passes, %.0f ns per event (host, simulation driver); fast-path hits %llu of %llu "
          "allocations\n",
          o.timed_passes, ns / (static_cast<double>(o.timed_passes) * static_cast<double>(trace.ops.size())),
          static_cast<unsigned long long>(st.fast_path_hits - before.fast_path_hits),
          static_cast<unsigned long long>(st.allocations - before.allocations));
    }
    for (cudaStream_t s : streams) {
      if (s != nullptr) sim.destroy_stream(s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", o.trace.c_str(), e.what());
    return 1;
  }
  return 0;
}
