// sova_driver_time: where a trace's replay spends its time in the driver.
// Replays a trace on a sova::Pool built over TimedDriver (timed_driver.hpp),
// as the replay benchmark does (one replay, then a synchronize of every
// stream), and prints the time the first pass took (the pool's growth
// included: a fresh pool, or one that replayed --before's traces), and for the
// steady-state passes the time a replay took and,
// per kind of driver call, the calls and the time they took a replay, and the
// slow path's own counters (PoolStats: growth and its time). On the GPU this
// is what the simulation cannot say: what a map, an unmap, an access grant or
// an event record costs there, and how much of a replay they are.
//
//   sova_driver_time TRACE [--sim [--device-gib=N]] [--thorough] [--no-remap]
//                          [--warm-passes=N] [--passes=N] [--before=T1,T2,...]
//
// --sim replays on the host simulation instead of the GPU (its times are the
// simulation's, not a device's), of --device-gib GiB (default 80). Warm passes (default 5) are replayed first
// and not reported; then --passes (default 20) are measured together.
// --before replays other traces first on the same pool, three passes each on
// their own streams (gone when the next starts), the pool trimmed and its
// highs reset after each, as the replay benchmark's cases follow one another
// on its one warm pool: how much a pool's history changes a replay.
#include "streams.hpp"
#include "timed_driver.hpp"
#include "trace.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct Options {
  std::string trace;
  bool sim = false;
  std::size_t device_gib = 80;  // the simulation's device: an H100's memory
  bool remap = true;
  sova::RemapEffort effort = sova::RemapEffort::balanced;
  int warm_passes = 5;
  int passes = 20;
  std::vector<std::string> before;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const std::string_view arg(a);
    if (std::strcmp(a, "--sim") == 0) {
      o.sim = true;
    } else if (arg.starts_with("--device-gib=")) {
      o.device_gib = std::strtoull(a + 13, nullptr, 10);
    } else if (std::strcmp(a, "--no-remap") == 0) {
      o.remap = false;
    } else if (std::strcmp(a, "--thorough") == 0) {
      o.effort = sova::RemapEffort::thorough;
    } else if (arg.starts_with("--warm-passes=")) {
      o.warm_passes = std::atoi(a + 14);
    } else if (arg.starts_with("--before=")) {
      std::string list = a + 9;
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        if (comma > at) o.before.push_back(list.substr(at, comma - at));
        at = comma + 1;
      }
    } else if (arg.starts_with("--passes=")) {
      o.passes = std::atoi(a + 9);
    } else if (a[0] != '-' && o.trace.empty()) {
      o.trace = a;
    } else {
      return false;
    }
  }
  return !o.trace.empty() && o.passes > 0 && o.warm_passes >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: %s TRACE [--sim [--device-gib=N]] [--thorough] [--no-remap] [--warm-passes=N] [--passes=N] "
                 "[--before=T1,T2,...]\n",
                 argv[0]);
    return 2;
  }
  try {
    const sova_bench::Trace trace = sova_bench::load_trace(o.trace);
    if (trace.unknown_frees != 0) {
      std::fprintf(stderr, "%s: %zu frees of pointers never allocated: not replayed\n", o.trace.c_str(),
                   trace.unknown_frees);
      return 1;
    }
    std::unique_ptr<sova::SimDriver> sim;
    if (o.sim) {
      sova::SimConfig config;
      config.total_memory = o.device_gib << 30;
      sim = std::make_unique<sova::SimDriver>(config);
    }
    sova_bench::TimedDriver driver(sim ? static_cast<sova::Driver&>(*sim) : sova::cuda_driver());
    sova::PoolOptions options;
    options.driver = &driver;
    options.release_threshold = ~std::uint64_t{0};  // as the replay benchmark: keep everything
    options.remap = o.remap;
    options.remap_effort = o.effort;
    const sova_bench::ReplayStreams streams(sim.get(), trace.streams);  // outlives the pool
    sova::Pool pool(options);
    auto replay_on = [&pool](const sova_bench::Trace& t, const sova_bench::ReplayStreams& on,
                             std::vector<void*>& live) {
      for (const sova_bench::TraceOp& op : t.ops) {
        if (op.bytes != 0) {
          live[op.slot] = pool.allocate(op.bytes, on[op.stream]);
        } else {
          pool.deallocate(live[op.slot], on[op.stream]);
          live[op.slot] = nullptr;
        }
      }
      on.sync();
    };
    auto trim_and_reset = [&pool] {
      pool.trim_to(0);
      const std::uint64_t zero = 0;
      pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &zero);
      pool.set_attribute(cudaMemPoolAttrUsedMemHigh, &zero);
    };
    for (const std::string& path : o.before) {
      const sova_bench::Trace other = sova_bench::load_trace(path);
      const sova_bench::ReplayStreams other_streams(sim.get(), other.streams);
      std::vector<void*> live(other.slots, nullptr);
      for (int pass = 0; pass < 3; ++pass) replay_on(other, other_streams, live);
      trim_and_reset();
    }
    std::vector<void*> slots(trace.slots, nullptr);
    auto replay = [&] { replay_on(trace, streams, slots); };
    double first_ns = 0;  // the first warm pass; 0 without warm passes
    for (int pass = 0; pass < o.warm_passes; ++pass) {
      const auto pass_start = std::chrono::steady_clock::now();
      replay();
      if (pass == 0) {
        first_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - pass_start).count();
      }
    }

    const sova::PoolStats before = pool.stats();
    const sova_bench::TimedDriver::Tallies driver_before = driver.tallies();
    const auto start = std::chrono::steady_clock::now();
    for (int pass = 0; pass < o.passes; ++pass) replay();
    const double total_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    const sova::PoolStats after = pool.stats();
    const sova_bench::TimedDriver::Tallies driver_after = driver.tallies();

    const double passes = o.passes;
    const double replay_us = total_ns / passes / 1e3;
    std::printf("%s on %s (%s remapping%s): %d passes after %d warm ones\n", o.trace.c_str(), driver.name(),
                o.remap ? "with" : "without", o.effort == sova::RemapEffort::thorough ? ", thorough" : "", o.passes,
                o.warm_passes);
    if (o.warm_passes > 0) {
      std::printf("first pass %.1f us (%s, its growth included)\n", first_ns / 1e3,
                  o.before.empty() ? "a fresh pool" : "after --before's traces");
    }
    std::printf("replay %.1f us (%zu events, %.0f ns each); peak reserved / trace peak %.3f\n", replay_us,
                trace.ops.size(), total_ns / passes / static_cast<double>(trace.ops.size()),
                static_cast<double>(after.reserved_high) / static_cast<double>(trace.peak_requested));
    double driver_us = 0;
    std::printf("%-20s %12s %12s %10s %8s\n", "driver call", "calls/pass", "us/pass", "us/call", "share");
    for (int i = 0; i < sova_bench::TimedDriver::kCallCount; ++i) {
      const double calls = static_cast<double>(driver_after[i].calls - driver_before[i].calls) / passes;
      const double us = static_cast<double>(driver_after[i].ns - driver_before[i].ns) / passes / 1e3;
      if (calls == 0) continue;
      driver_us += us;
      std::printf("%-20s %12.2f %12.1f %10.2f %7.1f%%\n", sova_bench::TimedDriver::call_name(i), calls, us, us / calls,
                  100.0 * us / replay_us);
    }
    std::printf("%-20s %12s %12.1f %10s %7.1f%%\n", "all driver calls", "", driver_us, "",
                100.0 * driver_us / replay_us);
    auto per_pass = [&](std::uint64_t now, std::uint64_t then) { return static_cast<double>(now - then) / passes; };
    std::printf(
        "slow path a pass: heap %.1f (%.1f us), grown %.1f (%.1f us); fast-path hits %.1f of %.1f; "
        "chunks remapped %.1f (to ghosts %.1f), created %.2f, released %.2f; remap waits %.2f\n",
        per_pass(after.slow_from_heap + after.slow_from_heap_all, before.slow_from_heap + before.slow_from_heap_all),
        per_pass(after.slow_from_heap_ns + after.slow_from_heap_all_ns,
                 before.slow_from_heap_ns + before.slow_from_heap_all_ns) /
            1e3,
        per_pass(after.slow_grown, before.slow_grown), per_pass(after.slow_grown_ns, before.slow_grown_ns) / 1e3,
        per_pass(after.fast_path_hits, before.fast_path_hits), per_pass(after.allocations, before.allocations),
        per_pass(after.chunks_remapped, before.chunks_remapped),
        per_pass(after.remaps_to_ghosts, before.remaps_to_ghosts), per_pass(after.chunks_mapped, before.chunks_mapped),
        per_pass(after.chunks_unmapped, before.chunks_unmapped), per_pass(after.remap_waits, before.remap_waits));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", o.trace.c_str(), e.what());
    return 1;
  }
  return 0;
}
