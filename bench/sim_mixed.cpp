// sova_sim_mixed: threads_mixed's loop (bench/threads_mixed.hpp) with the
// streams interleaved on one host thread, on sova's host simulation: which
// share of allocations missed the streams' caches, and the pool's peak
// reserved and live bytes. A tool for the miss rules: one thread
// makes the interleaving repeatable, where threads on a 2-core host are not;
// the simulation's fences still complete on their own threads, so shares move
// by a few points between runs. No timings: those come from sova_bench on a GPU.
//
//   sova_sim_mixed [--classes=C] [--streams=N] [--pairs=P] [--threads]
//
// The loop: bench/interleaved_mixed.hpp, C size classes (default 16). After a
// warm-up of 4096 pairs per stream, P pairs (default 100000) are counted.
// --threads: each stream on its own host thread with its own random sizes
// (seed 1234 + its index), as threads_mixed runs on the GPU; P pairs per
// thread; not repeatable, for the miss rules under real concurrency.
#include "interleaved_mixed.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::size_t classes = 16;
  std::size_t streams = 1;
  std::size_t pairs = 100000;
  bool threads = false;
};

bool parse(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    auto value = [&](const char* prefix, std::size_t* out) {
      const std::size_t n = std::strlen(prefix);
      if (std::strncmp(a, prefix, n) != 0) return false;
      *out = std::strtoull(a + n, nullptr, 10);
      return true;
    };
    if (std::strcmp(a, "--threads") == 0) {
      args->threads = true;
      continue;
    }
    if (!value("--classes=", &args->classes) && !value("--streams=", &args->streams) &&
        !value("--pairs=", &args->pairs)) {
      return false;
    }
  }
  return args->classes != 0 && args->streams != 0 && args->pairs != 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse(argc, argv, &args)) {
    std::fprintf(stderr, "usage: %s [--classes=C] [--streams=N] [--pairs=P] [--threads]\n", argv[0]);
    return 2;
  }
  try {
    sova::SimDriver sim;
    sova::PoolOptions options;
    options.driver = &sim;
    options.release_threshold = std::numeric_limits<std::uint64_t>::max();
    sova::Pool pool(options);
    std::vector<cudaStream_t> streams;
    for (std::size_t i = 0; i < args.streams; ++i) streams.push_back(sim.create_stream());
    sova::PoolStats before{}, after{};
    sova::SimCounters sim_before{}, sim_after{};
    std::size_t counted = args.pairs;
    if (!args.threads) {
      sova_bench::InterleavedMixed loop(pool, streams, args.classes);
      loop.run(4096 * streams.size());  // warm-up
      before = pool.stats();
      sim_before = sim.counters();
      loop.run(args.pairs);
      after = pool.stats();
      sim_after = sim.counters();
      loop.free_all();
    } else {
      counted = args.pairs * streams.size();
      std::vector<std::unique_ptr<sova_bench::InterleavedMixed>> loops;
      for (std::size_t i = 0; i < streams.size(); ++i)
        loops.push_back(std::make_unique<sova_bench::InterleavedMixed>(
            pool, std::vector<cudaStream_t>{streams[i]}, args.classes, 1234u + static_cast<std::uint32_t>(i)));
      const auto parties = static_cast<std::ptrdiff_t>(streams.size()) + 1;
      std::barrier warm(parties), done(parties);
      std::vector<std::thread> threads;
      for (auto& loop : loops) {
        threads.emplace_back([&, l = loop.get()] {
          l->run(4096);
          warm.arrive_and_wait();  // the main thread snapshots the stats
          warm.arrive_and_wait();
          l->run(args.pairs);
          done.arrive_and_wait();
        });
      }
      warm.arrive_and_wait();
      before = pool.stats();
      sim_before = sim.counters();
      warm.arrive_and_wait();
      done.arrive_and_wait();
      after = pool.stats();
      sim_after = sim.counters();
      for (auto& t : threads) t.join();
      for (auto& loop : loops) loop->free_all();
    }
    const std::uint64_t misses = sova_bench::InterleavedMixed::misses(before, after);
    std::printf(
        "classes %zu, streams %zu%s: %.1f%% of %zu allocations missed (heap %llu, heap after the kept "
        "blocks %llu, other streams %llu, wait %llu, grown %llu); peak reserved %.1f MiB, peak live %.1f MiB; "
        "driver: %llu chunks mapped, %llu unmapped, %llu remapped; %llu events recorded, %llu queried, %llu stream "
        "waits\n",
        args.classes, args.streams, args.threads ? " (threads)" : "",
        100.0 * static_cast<double>(misses) / static_cast<double>(counted), counted,
        static_cast<unsigned long long>(after.slow_from_heap - before.slow_from_heap),
        static_cast<unsigned long long>(after.slow_from_heap_all - before.slow_from_heap_all),
        static_cast<unsigned long long>(after.slow_from_other_streams - before.slow_from_other_streams),
        static_cast<unsigned long long>(after.slow_with_wait - before.slow_with_wait),
        static_cast<unsigned long long>(after.slow_grown - before.slow_grown),
        static_cast<double>(after.reserved_high) / (1 << 20), static_cast<double>(after.used_high) / (1 << 20),
        static_cast<unsigned long long>(after.chunks_mapped - before.chunks_mapped),
        static_cast<unsigned long long>(after.chunks_unmapped - before.chunks_unmapped),
        static_cast<unsigned long long>(after.chunks_remapped - before.chunks_remapped),
        static_cast<unsigned long long>(after.events_recorded - before.events_recorded),
        static_cast<unsigned long long>(sim_after.event_queries - sim_before.event_queries),
        static_cast<unsigned long long>(after.cross_stream_waits - before.cross_stream_waits));
    for (cudaStream_t s : streams) {
      sim.stream_synchronize(s);
      sim.destroy_stream(s);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sova_sim_mixed: %s\n", e.what());
    return 1;
  }
  return 0;
}
