// A small pool shared by streams keeps each stream's cache of recurring small
// sizes (threads_mixed): the growth budget's slack is at least what
// the streams' caches may keep (kServingKeptCacheBytes each). Before, the slack
// was 1/64 of a live peak of under a megabyte: a miss whose fit needed a new
// granule flushed the stream's kept blocks, and the stream missed on its next
// ~20 allocations, 10-33% of all of them (for 2 MiB less memory). And a
// miss that needed a new granule took every other stream's kept blocks, which
// then missed in turn (16 streams: 2-21% of allocations); now other streams'
// kept blocks are taken only where growing would exceed the budget.
#include "core/sim_pool_fixture.hpp"
// From the tests' include directory (test/): the loop lives with the tool.
#include "../bench/interleaved_mixed.hpp"

#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

// sova_sim_mixed's loop on a fresh pool: `streams` streams of `classes`
// sizes, a warm-up, then 20,000 measured pairs. What the measured part
// missed, and the pool's statistics after it.
struct MixedRun {
  double missed_share;
  PoolStats after;
};

MixedRun run_mixed(SimDriver& sim, const PoolOptions& options, int streams, std::size_t classes) {
  constexpr std::size_t kMeasured = 20000;
  Pool pool(options);
  std::vector<cudaStream_t> handles;
  for (int i = 0; i < streams; ++i) handles.push_back(sim.create_stream());
  sova_bench::InterleavedMixed loop(pool, handles, classes);
  loop.run(4096 * static_cast<std::size_t>(streams));  // warm-up
  const PoolStats before = pool.stats();
  loop.run(kMeasured);
  const PoolStats after = pool.stats();
  const auto misses = static_cast<double>(sova_bench::InterleavedMixed::misses(before, after));
  loop.free_all();
  for (cudaStream_t s : handles) {
    sim.stream_synchronize(s);
    sim.destroy_stream(s);
  }
  return MixedRun{misses / static_cast<double>(kMeasured), after};
}

}  // namespace

TEST_CASE("streams cycling through 16 small sizes keep their caches in a small pool", "[core][issue12]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  for (const int streams : {2, 4, 16}) {
    INFO(streams << " streams");
    const MixedRun run = run_mixed(sim, options, streams, /*classes=*/16);
    CHECK(run.missed_share < 0.02);
    // Within the budget: the live peak plus 4 MiB a stream and a granule.
    CHECK(run.after.reserved_high <= run.after.used_high +
                                         static_cast<std::uint64_t>(streams) * (std::uint64_t{4} << 20) +
                                         (std::uint64_t{2} << 20));
  }
}

TEST_CASE("streams cycling through 64 nearby small sizes hit their caches", "[core][issue12]") {
  // 256 B + k x 4 KiB for k < 64: exact sizes, 64 of them up to 252 KiB, were
  // more than a stream's cache keeps, and 73-80% of allocations missed (1, 4
  // and 16 streams). The default policy's size classes below
  // kSmallClassLimit make them 25 (11-24% missed); a cache over its bound
  // giving back its least recently freed blocks instead of all of them, and
  // a small pool's only stream growing within the budget instead of
  // flushing them, made it 3% with one stream and 3-8% with several. With
  // several streams active, a serving cache keeps up to
  // kServingKeptCacheBytes (8 MiB; the 25 classes' working set is ~6 MiB)
  // and the budget's slack is as much per stream: 0.1% (with 4 MiB, 5-8%
  // and 3-5%, which fail here). Memory: within the growth budget, the live
  // peak plus 4 MiB (one stream) or 8 MiB a stream, and a granule (6, 32 and
  // 114 MiB reserved for 1.7, 5 and 18 MiB live).
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  for (const int streams : {1, 4, 16}) {
    INFO(streams << " streams");
    const MixedRun run = run_mixed(sim, options, streams, /*classes=*/64);
    const std::uint64_t per_stream = (streams == 1 ? std::uint64_t{4} : std::uint64_t{8}) << 20;
    CHECK(run.missed_share < (streams == 1 ? 0.05 : 0.02));
    CHECK(run.after.reserved_high <=
          run.after.used_high + static_cast<std::uint64_t>(streams) * per_stream + (std::uint64_t{2} << 20));
  }
}
