// A randomized sleep and wake scenario on the simulation
// (test_sleep_scenarios.cpp): several pools, blocks of mixed sizes (the
// RL loop's 1 GiB, 256 MiB, 96 MiB + 4100 B, 4 KiB, 777 B, 3 MiB, 64 MiB,
// scaled down with the granule), frees before the sleep and while asleep,
// backup and discard, injected driver failures in sleep and wake, trims and
// another stream's allocations racing the restore (the copies made late).
// Every step checks what the pool promises: no device fault (a copy or
// kernel touching memory not mapped), every kept byte back after wake, and
// every block handed out after wake keeping what its stream wrote.
#pragma once

#include <cstdint>
#include <string>

namespace sova::sleep_test {

/// What one program did, to tell programs that exercised the paths from
/// programs that did nothing.
struct ScenarioCounts {
  long sleeps = 0, failed_sleeps = 0, cut_short_sleeps = 0, wakes = 0, failed_wakes = 0, frees_asleep = 0,
       trims_asleep = 0, reuses_after_wake = 0, trims_after_wake = 0, blocks_checked = 0;
};

/// Runs program `seed`; returns "" when every promise held, else what broke
/// (the first). Adds what it did to `counts`.
std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts);

}  // namespace sova::sleep_test
