// Streams that go quiet or are destroyed (the pool is not told): the release
// worker marks a stream inactive after kActivityWindowNs without an
// allocation or free, and makes its frees that no fence covers known
// complete with a synchronize on its own thread
// (PoolCore::track_stream_activity), so that other streams get that memory
// back without growing, and without the program synchronizing. A destroyed
// stream whose handle a new stream reuses is retired at once (the stream
// checks see the new stream id).
#include "core/sim_pool_fixture.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Waits up to `limit` (polling the pool's statistics every 5 ms) for
// `holds(stats)`: what the release worker does, it does in its own time.
template <class Predicate>
bool stats_within(const sova::Pool& pool, std::chrono::milliseconds limit, Predicate holds) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (holds(pool.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

// threads_mixed's loop on one thread: each stream holds a window of 8 blocks
// of sizes 256 B + k x 4 KiB (k < 64) and replaces a random one `pairs`
// times, the streams interleaved; then frees its window. Returns the slow-path
// allocations (and those that flushed the stream's kept blocks too) of the
// last half of the pairs.
struct MixedRun {
  std::uint64_t slow = 0;
  std::uint64_t flushed_kept = 0;
};
MixedRun run_mixed(sova::Pool& pool, const std::vector<cudaStream_t>& streams, int pairs, unsigned seed) {
  constexpr std::size_t kWindow = 8;
  std::mt19937 rng(seed);
  auto size = [&] { return 256 + (rng() % 64) * 4096; };
  std::vector<std::array<void*, kWindow>> live(streams.size());
  for (std::size_t s = 0; s < streams.size(); ++s) {
    for (void*& p : live[s]) p = pool.allocate(size(), streams[s]);
  }
  sova::PoolStats half{};
  for (int pair = 0; pair < pairs; ++pair) {
    if (pair == pairs / 2) half = pool.stats();
    for (std::size_t s = 0; s < streams.size(); ++s) {
      void*& slot = live[s][rng() % kWindow];
      pool.deallocate(slot, streams[s]);
      slot = pool.allocate(size(), streams[s]);
    }
  }
  const sova::PoolStats end = pool.stats();
  for (std::size_t s = 0; s < streams.size(); ++s) {
    for (void* p : live[s]) pool.deallocate(p, streams[s]);
  }
  return MixedRun{(end.allocations - end.fast_path_hits) - (half.allocations - half.fast_path_hits),
                  end.slow_from_heap_all - half.slow_from_heap_all};
}

}  // namespace

TEST_CASE("streams that replace destroyed ones keep their caches while the old caches wait", "[core][streams]") {
  // A benchmark's runs, or a server's requests: streams made, used, synchronized
  // and destroyed, then new ones (CUDA hands the handles out again). The old
  // streams' cached blocks come back only with the release worker's
  // synchronize (up to ~1.2 s later). Counted against the growth budget, they
  // put the new streams' misses over it, where a miss flushes the stream's
  // kept blocks too and the stream misses again on its next allocations
  // (threads_mixed, 16 threads: a quarter to a half of all pairs missed in
  // one run of three). Left out of the budget (PoolStats::stranded_bytes),
  // with the best fit looking past other streams' pending frees, the new
  // streams keep their caches (docs/design.md, "Stranded caches").
  sova::SimDriver sim(sova::test::small_sim(std::size_t{1} << 30));
  sova::Pool pool(sova::test::options_on(sim));
  constexpr int kStreams = 16;
  constexpr int kPairs = 2000;
  constexpr int kRuns = 6;
  constexpr std::uint64_t kMeasured = kPairs / 2 * kStreams;  // allocations of a run's last half
  std::vector<std::uint64_t> slow;                            // of each run after the first
  std::uint64_t flushes = 0;                                  // of kept blocks, all runs
  for (int run = 0; run < kRuns; ++run) {
    std::vector<cudaStream_t> streams(kStreams);
    for (cudaStream_t& s : streams) s = sim.create_stream();
    const MixedRun mixed = run_mixed(pool, streams, kPairs, static_cast<unsigned>(run));
    const sova::PoolStats stats = pool.stats();
    UNSCOPED_INFO("run " << run << ": " << mixed.slow << " slow, " << mixed.flushed_kept << " flushing kept blocks; "
                         << (stats.stranded_bytes >> 10) << " KiB stranded, " << (stats.reserved_current >> 20)
                         << " MiB reserved");
    CHECK(stats.retired_streams == static_cast<std::uint64_t>(run * kStreams));
    if (run > 0) slow.push_back(mixed.slow);
    flushes += mixed.flushed_kept;
    for (cudaStream_t s : streams) {
      REQUIRE(sim.stream_synchronize(s) == cudaSuccess);  // the program knows; the pool is not told
      sim.destroy_stream(s);
    }
  }
  // The median run: where the worker's wait on fences lands in a run (every
  // 20 ms) makes single runs vary. Measured, 60 runs of this test: no kept
  // block flushed, the worst run 4% missed, most 0.6%; with the old caches
  // counted against the budget, medians 9.8-75%, from the third run on
  // 50-80% with hundreds of kept-block flushes each; without the fit's look
  // past pending candidates, single runs up to 20% (one test in five).
  std::sort(slow.begin(), slow.end());
  const std::uint64_t median = slow[slow.size() / 2];
  CHECK(median * 20 < kMeasured);  // under 5%
  CHECK(flushes < 10);             // a storm flushes dozens of times (9-86 in the runs that had one)
}

TEST_CASE("a destroyed stream's unfenced frees come back by a trim, never by a background synchronize",
          "[core][streams]") {
  sova::SimDriver sim(sova::test::small_sim());
  sova::Pool pool(sova::test::options_on(sim));  // stream checks on: the default

  cudaStream_t first = sim.create_stream();
  void* blocks[3] = {};
  // 1 MiB: below a granule, so the frees record no fence of their own.
  for (void*& p : blocks) p = pool.allocate(kMiB, first);
  for (void* p : blocks) pool.deallocate(p, first);
  REQUIRE(sim.stream_synchronize(first) == cudaSuccess);  // the program knows; the pool is not told
  sim.destroy_stream(first);

  cudaStream_t second = sim.create_stream();
  REQUIRE(second == first);                   // the handle comes back (as CUDA's pointers do)
  void* small = pool.allocate(4096, second);  // the new stream id: the old state is retired
  const std::uint64_t synchronizes = sim.counters().device_synchronizes;

  // The worker runs every 20 ms. Those frees have no fence, and the old
  // stream's handle must never be asked again (a destroyed handle crashes the
  // driver): only a device synchronize completes them, which the worker never
  // makes (it would invalidate any capture running on the device).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(sim.counters().device_synchronizes == synchronizes);
  CHECK(pool.stats().stranded_bytes >= 3 * kMiB);

  // A trim synchronizes (docs/graphs.md, "Captures sova does not know"), and
  // the retired cache comes back and is released, no longer counted stranded.
  pool.trim_to(0);
  CHECK(sim.counters().device_synchronizes > synchronizes);
  CHECK(sova::test::reserved_of(pool) <= std::uint64_t{2} << 20);  // the live 4 KiB's granule at most
  CHECK(stats_within(pool, std::chrono::milliseconds(2000),
                     [](const sova::PoolStats& stats) { return stats.stranded_bytes == 0; }));
  pool.deallocate(small, second);
  REQUIRE(sim.stream_synchronize(second) == cudaSuccess);
  sim.destroy_stream(second);
}

TEST_CASE("an idle stream's unfenced frees stay its own until its next call or a trim", "[core][streams]") {
  sova::SimDriver sim(sova::test::small_sim());
  sova::Pool pool(sova::test::options_on(sim));
  cudaStream_t quiet = sim.create_stream();
  void* blocks[3] = {};
  for (void*& p : blocks) p = pool.allocate(kMiB, quiet);
  for (void* p : blocks) pool.deallocate(p, quiet);
  const std::uint64_t synchronizes = sim.counters().device_synchronizes;
  // Nothing more on `quiet`, which stays alive: after ~200 ms it counts as
  // inactive, its cache stranded; the worker (every 20 ms) makes no synchronize.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(sim.counters().device_synchronizes == synchronizes);
  CHECK(pool.stats().stranded_bytes >= 3 * kMiB);

  // Its next call: its own frees are its own again.
  void* mine = pool.allocate(kMiB, quiet);
  CHECK((mine == blocks[0] || mine == blocks[1] || mine == blocks[2]));
  pool.deallocate(mine, quiet);
  REQUIRE(sim.stream_synchronize(quiet) == cudaSuccess);
  sim.destroy_stream(quiet);
}

TEST_CASE("a stream made anew for each run leaves one active stream, the others retired", "[core][streams]") {
  // A benchmark's runs, or a program's phases: each creates its stream,
  // allocates, synchronizes and destroys it; CUDA hands the handle out again.
  // Counting every state as a stream made the pool follow the rules for
  // streams that share it (threads_mixed on the H100: 7x the misses).
  sova::SimDriver sim(sova::test::small_sim());
  sova::Pool pool(sova::test::options_on(sim));
  constexpr int kRuns = 5;
  for (int run = 0; run < kRuns; ++run) {
    cudaStream_t s = sim.create_stream();
    void* p = pool.allocate(64 * 1024, s);
    pool.deallocate(p, s);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    sim.destroy_stream(s);
  }
  sova::PoolStats stats = pool.stats();
  CHECK(stats.stream_states == kRuns);
  CHECK(stats.retired_streams == kRuns - 1);

  // The count is taken on a miss, once per ~200 ms window.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  cudaStream_t s = sim.create_stream();
  void* p = pool.allocate(3 * 64 * 1024, s);                   // a size not cached: a miss
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a worker pass that sees the new stream
  stats = pool.stats();
  CHECK(stats.retired_streams == kRuns);
  CHECK(stats.active_streams == 1);
  pool.deallocate(p, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("one stream counts as one active stream, whenever the release worker looked", "[core][streams]") {
  // The worker counted no state before the pool's first stream and stored at
  // least 1; the new stream then added itself: 2 active streams for one, the
  // shared-pool rules and a budget slack of two streams. A remap test that
  // expected a wait grew instead (CI, under ASan and TSan on a loaded host).
  sova::SimDriver sim(sova::test::small_sim());
  sova::Pool pool(sova::test::options_on(sim));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // worker passes with no stream yet
  cudaStream_t s = sim.create_stream();
  void* p = pool.allocate(4096, s);
  // At once: never more than the one stream (the worker's next pass may not
  // have seen it yet, and may count it only then).
  CHECK(pool.stats().active_streams <= 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));  // a pass that sees it
  CHECK(pool.stats().active_streams == 1);
  pool.deallocate(p, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("a stream back from a pause counts its own cache in the growth budget", "[core][streams][remap]") {
  // While a stream makes no call for kActivityWindowNs (a long kernel), the
  // worker counts it inactive and its cache stranded: out of the growth
  // budget, for the other streams. Its own next miss must count it again:
  // left out, the stream grew new memory instead of remapping its own free
  // chunks (a conformance test failed that way on a loaded host, where its
  // device work took over 200 ms).
  sova::SimDriver sim(sova::test::small_sim(std::size_t{1} << 30));
  sova::PoolOptions options = sova::test::options_on(sim);
  options.remap = true;
  options.release_threshold = UINT64_MAX;  // no idle release meanwhile
  sova::Pool pool(options);
  cudaStream_t s = sim.create_stream();
  constexpr std::size_t kBlock = 32 * kMiB;  // a chunk each
  std::array<void*, 8> blocks{};
  for (void*& p : blocks) p = pool.allocate(kBlock, s);
  for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);

  // Quiet for longer than the activity window (200 ms) and a worker period.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(pool.stats().stranded_bytes >= 4 * kBlock);  // its four free blocks, for the others

  void* big = pool.allocate(4 * kBlock, s);  // beyond the budget: its own four chunks move
  const sova::PoolStats stats = pool.stats();
  CHECK(stats.chunks_remapped == 4);
  CHECK(stats.chunks_mapped == 8);
  CHECK(stats.stranded_bytes == 0);
  pool.deallocate(big, s);
  for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}
