// Measuring one configuration of the driver-call budget: warm-up pairs, then
// kPairs pairs counted on the calling thread (SimDriver::count_this_thread).
#pragma once

#include "budget/budget_table.hpp"

#include <chrono>
#include <functional>
#include <string>

namespace sova::budget {

/// Long enough for a steady state: every event a loop records again is made
/// (a stream keeps up to kMaxFences, 8, outstanding; a cross-stream loop
/// fencing every 16th free fills them in 128 pairs), and a multiple of those
/// 16 frees, so that the counted pairs start where a count-driven fence falls.
inline constexpr std::size_t kWarmPairs = 256;
/// A multiple of every N/M rate's M in the table.
inline constexpr std::size_t kPairs = 64;

/// What kPairs calls of `pair` ask of `sim` on this thread, after kWarmPairs
/// uncounted ones. `between` (the test's own driver calls: a synchronize that
/// makes a cross-stream loop deterministic) runs after each pair, not counted.
inline Counted measure(SimDriver& sim, const std::function<void()>& pair, const std::function<void()>& between = {}) {
  for (std::size_t i = 0; i < kWarmPairs; ++i) {
    pair();
    if (between) between();
  }
  Counted counted;
  counted.pairs = kPairs;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < kPairs; ++i) {
    sim.count_this_thread(&counted.counts);
    pair();
    sim.count_this_thread(nullptr);
    if (between) between();
  }
  counted.elapsed_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  return counted;
}

/// The C API's configurations (budget_capi.cpp), on the C API tests' process
/// driver; the _ptsz ones come from a file built as nvcc
/// --default-stream per-thread builds (budget_capi_ptsz.cpp).
std::vector<Measured> measure_capi();
std::vector<Measured> measure_capi_ptsz();

}  // namespace sova::budget
