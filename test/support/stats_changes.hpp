// Every statistic of a pool, compared between two snapshots: the counters a
// call changed, by name, for tests of "a refused call changes nothing"
// (README, "Semantics in one page"; docs/runtime-errors.md, "Bad input,
// route by route").
//
// Walks the one list of counters (lib/capi/stats_fields.hpp), so a counter
// added to the pool is compared here too without a change to this file.
// Left out: the counters that move with time or with the release worker's
// timing, not with the calls made (active_streams, counted by the worker;
// the *_ns timings).
#pragma once

#include "capi/stats_fields.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>
#include <sova/stats.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace sova::test {

/// Whether a counter of that name moves with time rather than with calls.
inline bool moves_with_time(const char* name) {
  const std::size_t n = std::strlen(name);
  return std::strcmp(name, "active_streams") == 0 || std::strcmp(name, "activeStreams") == 0 ||
         (n > 3 && std::strcmp(name + n - 3, "_ns") == 0) || (n > 2 && std::strcmp(name + n - 2, "Ns") == 0);
}

/// Appends "name: a -> b" to `changed` when the counter differs, moves with
/// calls and is not in `allowed` (both stats_changes overloads compare so).
inline void note_change(std::vector<std::string>& changed, const std::vector<std::string>& allowed, const char* name,
                        std::uint64_t a, std::uint64_t b) {
  if (a == b || moves_with_time(name)) return;
  for (const std::string& skip : allowed) {
    if (skip == name) return;
  }
  changed.push_back(std::string(name) + ": " + std::to_string(a) + " -> " + std::to_string(b));
}

/// "name: before -> after" for every counter that differs, in the list's
/// order; the names in `allowed` are not reported (a count the call is meant
/// to raise, such as failed_allocations for an allocation refused for
/// memory).
inline std::vector<std::string> stats_changes(const PoolStats& before, const PoolStats& after,
                                              const std::vector<std::string>& allowed = {}) {
  std::vector<std::string> changed;
  auto compare = [&](const char* name, std::uint64_t a, std::uint64_t b) { note_change(changed, allowed, name, a, b); };
#define SOVA_TEST_COMPARE(c_name, cpp_name) compare(#cpp_name, before.cpp_name, after.cpp_name);
  SOVA_POOL_STATS_FIELDS(SOVA_TEST_COMPARE)
#undef SOVA_TEST_COMPARE
  return changed;
}

/// The same for the C API's struct, by the C names.
inline std::vector<std::string> stats_changes(const sovaMemPoolStats& before, const sovaMemPoolStats& after,
                                              const std::vector<std::string>& allowed = {}) {
  std::vector<std::string> changed;
  auto compare = [&](const char* name, std::uint64_t a, std::uint64_t b) { note_change(changed, allowed, name, a, b); };
#define SOVA_TEST_COMPARE(c_name, cpp_name) compare(#c_name, before.c_name, after.c_name);
  SOVA_POOL_STATS_FIELDS(SOVA_TEST_COMPARE)
#undef SOVA_TEST_COMPARE
  return changed;
}

/// Every change as one line, for a CHECK's message.
inline std::string joined(const std::vector<std::string>& changes) {
  std::string text;
  for (const std::string& c : changes) text += (text.empty() ? "" : "; ") + c;
  return text;
}

}  // namespace sova::test

/// Fails the test (and goes on) where any statistic but `allowed`'s changed
/// between `before` and `after`, naming each.
#define CHECK_STATS_UNCHANGED(before, after, ...)                                          \
  do {                                                                                     \
    const std::vector<std::string> sova_changes_ =                                         \
        ::sova::test::stats_changes((before), (after), std::vector<std::string>{__VA_ARGS__}); \
    INFO("changed: " << ::sova::test::joined(sova_changes_));                               \
    CHECK(sova_changes_.empty());                                                          \
  } while (false)
