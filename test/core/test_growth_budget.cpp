// GrowthBudget (lib/core/growth_budget.hpp): the growth budget's rules, the
// kept-cache rules and the remapping credit, as pure logic (no driver).
#include "support/catch.hpp"

#include "core/growth_budget.hpp"

#include <cstdint>

using sova::detail::GrowthBudget;
namespace d = sova::detail;

namespace {
constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGranule = 2 * kMiB;
}  // namespace

TEST_CASE("growth budget: the slack is 1/64 of the live peak, or a floor per active stream", "[growth_budget]") {
  // Large pools: the 1/64 rule.
  CHECK(GrowthBudget::slack(64 * 1024 * kMiB, 1) == 1024 * kMiB);
  CHECK(GrowthBudget::slack(64 * 1024 * kMiB, 4) == 1024 * kMiB);
  // Small pools: kept_small_floor per stream, 4 MiB alone, 8 MiB shared.
  CHECK(GrowthBudget::slack(64 * kMiB, 1) == d::kKeptSmallCacheBytes);
  CHECK(GrowthBudget::slack(64 * kMiB, 0) == d::kKeptSmallCacheBytes);  // at least one stream
  CHECK(GrowthBudget::slack(64 * kMiB, 3) == 3 * d::kServingKeptCacheBytes);
  // At most kSlackStreams streams count.
  CHECK(GrowthBudget::slack(64 * kMiB, 100) == d::kSlackStreams * d::kServingKeptCacheBytes);
}

TEST_CASE("growth budget: growth is allowed up to the live peak plus slack and a granule", "[growth_budget]") {
  const std::uint64_t peak = 6400 * kMiB;  // slack 100 MiB
  const std::uint64_t limit = peak + 100 * kMiB + kGranule;
  CHECK(GrowthBudget::allows(limit - kGranule, 0, kGranule, peak, kGranule, 1));
  CHECK_FALSE(GrowthBudget::allows(limit - kGranule + 1, 0, kGranule, peak, kGranule, 1));
  // Stranded memory (quiet or destroyed streams' caches) does not count ...
  CHECK(GrowthBudget::allows(limit + 50 * kMiB, 50 * kMiB, 0, peak, kGranule, 1));
  // ... and never more than what is backed.
  CHECK(GrowthBudget::allows(10 * kMiB, 1000 * kMiB, limit, peak, kGranule, 1));
}

TEST_CASE("growth budget: the slow path waits first when free memory exceeds used memory", "[growth_budget]") {
  CHECK_FALSE(GrowthBudget::holds_too_much_free(64 * kMiB, 0));  // at least kFreeSlack free
  CHECK(GrowthBudget::holds_too_much_free(64 * kMiB + 1, 0));
  CHECK_FALSE(GrowthBudget::holds_too_much_free(2048 * kMiB, 1024 * kMiB));
  CHECK(GrowthBudget::holds_too_much_free(2048 * kMiB + 1, 1024 * kMiB));
}

TEST_CASE("growth budget: kept-cache rules", "[growth_budget]") {
  // A cache serves when it serves one allocation in kKeptReuseShare.
  CHECK(GrowthBudget::cache_serves(1, d::kKeptReuseShare));
  CHECK_FALSE(GrowthBudget::cache_serves(1, d::kKeptReuseShare + 1));
  CHECK(GrowthBudget::cache_serves(0, 0));
  // Several active streams always keep; one stream only in a small pool whose cache serves.
  CHECK(GrowthBudget::keeps_small_caches(2, 1024 * 1024 * kMiB, false));
  CHECK(GrowthBudget::keeps_small_caches(1, 64 * kMiB, true));
  CHECK_FALSE(GrowthBudget::keeps_small_caches(1, 64 * kMiB, false));
  CHECK_FALSE(GrowthBudget::keeps_small_caches(1, 64 * d::kKeptSmallCacheBytes, true));
  // The bound: 4 MiB for a cache that serves little; else the floor or 1/64 of the peak.
  CHECK(GrowthBudget::kept_cache_bound(false, 4, 1024 * 1024 * kMiB) == d::kKeptSmallCacheBytes);
  CHECK(GrowthBudget::kept_cache_bound(true, 1, 64 * kMiB) == d::kKeptSmallCacheBytes);
  CHECK(GrowthBudget::kept_cache_bound(true, 2, 64 * kMiB) == d::kServingKeptCacheBytes);
  CHECK(GrowthBudget::kept_cache_bound(true, 2, 64 * 1024 * kMiB) == 1024 * kMiB);
}

TEST_CASE("growth budget: thorough remapping's chunk limit", "[growth_budget]") {
  const GrowthBudget balanced(false);
  const GrowthBudget thorough(true);
  CHECK(balanced.chunk_limit_for(640 * kMiB) == 0);  // the arena's max_chunk
  CHECK(thorough.chunk_limit_for(kGranule) == d::kThoroughMinChunk);
  CHECK(thorough.chunk_limit_for(200 * kMiB) == 8 * kMiB);  // 12.5 MiB rounded down
  CHECK(thorough.chunk_limit_for(640 * kMiB) == d::kThoroughMaxChunk);
  CHECK(GrowthBudget::max_moves(3) == 3 * d::kRemapMovesPerCreate + d::kRemapMovesExtra);
}

TEST_CASE("growth budget: the remapping credit starts full, is spent and earned", "[growth_budget]") {
  GrowthBudget balanced(false);
  CHECK(balanced.units_left() == d::kRemapCreditUnits);
  balanced.earn(true);  // full: stays full
  CHECK(balanced.units_left() == d::kRemapCreditUnits);
  balanced.spend(d::kRemapCreditUnits + 5);  // down to nothing, not below
  CHECK(balanced.units_left() == 0);
  balanced.earn(true);
  balanced.earn(true);  // a recurring size: half a unit each
  CHECK(balanced.units_left() == 1);
  for (std::uint64_t i = 0; i < d::kRemapCreditScale - 1; ++i) balanced.earn(false);  // a sixteenth each
  CHECK(balanced.units_left() == 1);
  balanced.earn(false);
  CHECK(balanced.units_left() == 2);
  GrowthBudget thorough(true);
  thorough.spend(d::kRemapCreditUnits);
  thorough.earn(false);  // two units a miss, whatever the size
  CHECK(thorough.units_left() == d::kRemapCreditPerMissThorough / d::kRemapCreditScale);
}
