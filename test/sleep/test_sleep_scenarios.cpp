// Hundreds of randomized sleep and wake programs (sleep_scenario.hpp) on the
// simulation, from a fixed seed: each names its seed when a promise breaks, to
// be run again alone. The same generator runs on a GPU in
// test/gpu/test_scenario_sleep_programs.cpp.
#include "sleep/sleep_scenario.hpp"

#include "support/catch.hpp"

using namespace sova::sleep_test;

TEST_CASE("randomized sleep and wake programs keep every promise", "[sleep][scenario]") {
  constexpr std::uint64_t kFirstSeed = 0x51EE9;
  constexpr int kPrograms = 250;
  ScenarioCounts counts;
  for (int i = 0; i < kPrograms; ++i) {
    const std::uint64_t seed = kFirstSeed + static_cast<std::uint64_t>(i);
    const std::string broken = run_sleep_scenario(seed, counts);
    INFO("program seed " << seed);
    REQUIRE(broken == "");
  }
  // The programs reached the paths they are for.
  CHECK(counts.wakes > kPrograms / 2);
  CHECK(counts.failed_sleeps > 0);
  CHECK(counts.cut_short_sleeps > 0);
  CHECK(counts.failed_wakes > 0);
  CHECK(counts.frees_asleep > 0);
  CHECK(counts.trims_asleep > 0);
  CHECK(counts.reuses_after_wake > 0);
  CHECK(counts.trims_after_wake > 0);
  CHECK(counts.late_restores > 0);
  CHECK(counts.blocks_checked > 0);
}
