// Remapping's driver work is bounded (pool_core.hpp, kRemapMovesPerCreate and
// kRemapCreditRecurringMiss, at each RemapEffort: the bound below uses the
// most a miss can earn): allocations of random sizes, always beyond the growth
// budget, may not turn every miss into many chunk moves.
#include "core/pool_core.hpp"
#include "core/sim_pool_fixture.hpp"

#include <cstdint>
#include <vector>

using namespace sova;
using namespace sova::test;

TEST_CASE("remapping under random sizes spends at most its credit", "[core][remap]") {
  const std::size_t mib = std::size_t{1} << 20;
  SimDriver sim(small_sim(std::size_t{8} << 30));
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  const auto [effort, credit_per_miss] =
      GENERATE(std::pair{RemapEffort::balanced, detail::kRemapCreditRecurringMiss},
               std::pair{RemapEffort::thorough, detail::kRemapCreditPerMissThorough});
  options.remap_effort = effort;
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();

  // RMM's random_allocations shape (73% allocate, sizes up to 64 MiB, 1 GiB
  // live at most), every free made complete at once: the most remapping the
  // pool could find to do.
  std::uint64_t rng = 0x9E3779B97F4A7C15ull;
  auto next = [&rng] {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t live_bytes = 0;
  for (int op = 0; op < 6000; ++op) {
    const std::size_t bytes = 1 + next() % (64 * mib);
    if (live.empty() || (next() % 100 < 73 && live_bytes + bytes <= 1024 * mib)) {
      live.emplace_back(pool.allocate(bytes, s), bytes);
      live_bytes += bytes;
    } else {
      const std::size_t i = next() % live.size();
      pool.deallocate(live[i].first, s);
      live_bytes -= live[i].second;
      live[i] = live.back();
      live.pop_back();
    }
    pool.stream_synchronized(s);
  }
  const PoolStats stats = pool.stats();
  const std::uint64_t misses = stats.allocations - stats.fast_path_hits;
  // Every chunk unmapped here was released for a gap (no trim, no threshold).
  // Moves back to a ghost mapping make no driver call: not work.
  const std::uint64_t work = stats.chunks_remapped - stats.remaps_to_ghosts + stats.remap_waits + stats.chunks_unmapped;
  INFO("effort " << static_cast<int>(effort) << ", misses " << misses << ", moved " << stats.chunks_remapped << " ("
                 << stats.remaps_to_ghosts << " to ghosts), waits " << stats.remap_waits << ", released "
                 << stats.chunks_unmapped << ", peak overhead " << stats.peak_overhead());
  CHECK(stats.chunks_remapped > 0);  // it did remap: the bound is not met by doing nothing
  CHECK(work <= detail::kRemapCreditUnits + misses * credit_per_miss / detail::kRemapCreditScale);
  pool.check_invariants();
  for (const auto& [ptr, bytes] : live) pool.deallocate(ptr, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
