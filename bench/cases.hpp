// sova benchmarks — what every Google Benchmark case file shares.
#pragma once

#include "allocators.hpp"

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>

namespace sova_bench {

/// The small sizes the thread-scaling and burst cases cycle through.
inline constexpr std::size_t kSmallSizes[] = {256, 1024, 4096, 16384, 65536};
inline constexpr std::size_t kSmallSizeCount = sizeof kSmallSizes / sizeof kSmallSizes[0];

/// Runs body(a) for a fresh allocator A: skips with A's reason when A cannot
/// run here ("no GPU"), labels the run "cuda" or "sim", and turns an exception
/// into SkipWithError so that one failing allocator does not end the run.
template <class A, class Body>
void run_case(benchmark::State& state, Body&& body) {
  A a;
  if (!a.why_not.empty()) {
    state.SkipWithError(a.why_not.c_str());
    return;
  }
  state.SetLabel(a.label);
  try {
    body(a);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

/// "<group>/<A::kName>", the name every case registers under.
template <class A>
std::string case_name(const char* group) {
  return std::string(group) + "/" + A::kName;
}

/// a.trim(), and throws std::runtime_error when memory stays reserved after it
/// (live blocks, e.g. left by a case that failed half-way): the cases that
/// measure an empty allocator (pair_cold/, growth/) would measure a warm one.
template <class A>
void trim_to_empty(A& a) {
  const std::uint64_t left = a.trim();
  if (left != 0) {
    throw std::runtime_error(std::to_string(left) +
                             " bytes stay reserved after trimming (live blocks, e.g. "
                             "from a failed case): cannot start from an empty allocator");
  }
}

}  // namespace sova_bench
