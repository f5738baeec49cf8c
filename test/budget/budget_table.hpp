// The driver-call budget's table, read from docs/design.md ("Driver calls per
// pair"): one row per configuration, the calls by kind (sova::SimCall's names)
// that steady-state allocate/free pairs make on the caller's thread, and how
// a thread's counts over a measured loop are judged against a row.
#pragma once

#include <sova/sim.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sova::budget {

/// How often one kind of call comes, as a cell states it:
///   "kind N"      exactly N calls every pair;
///   "kind N/M"    exactly N calls every M pairs (a count-driven call: a
///                 fence on every 16th free of another stream's block);
///   "kind ≤N/ms"  at most N calls per millisecond the loop ran, none
///                 required (a time-driven call: a fence once an interval
///                 passed, which a fast loop never reaches and a slow one —
///                 under a sanitizer, on a loaded host — does).
struct Rate {
  enum class Per { pairs, ms };
  Per per = Per::pairs;
  std::size_t calls = 0;
  std::size_t pairs = 1;  ///< Per::pairs only
  bool operator==(const Rate&) const = default;
};

/// Rates by kind name; kinds with no call are absent.
using Calls = std::map<std::string, Rate>;

struct Row {
  std::string configuration;  ///< the first cell, without its backticks
  Calls calls;                ///< the second cell: "none" or "kind RATE, kind RATE"
};

/// The rows of the first table after the heading "Driver calls per pair" in
/// `markdown`. Empty, with `*error` saying why, when there is no such heading
/// or table, a configuration is named twice, a row gives no reason, or a cell
/// names a kind that is no SimCall or a rate that is none of Rate's forms.
std::vector<Row> parse_table(const std::string& markdown, std::string* error);

/// docs/design.md's text (the source tree's, found where the build was configured).
std::string design_md();

/// "kind RATE, kind RATE" (sorted by name), or "none": as the table writes a cell.
std::string format(const Calls& calls);

/// What one thread asked of the driver over a measured loop.
struct Counted {
  std::array<std::size_t, kSimCallKinds> counts{};
  std::size_t pairs = 0;
  std::int64_t elapsed_ns = 0;  ///< the counted loop's wall time (its uncounted calls between pairs too)
};

/// The counts as a cell would state them, every kind as exact: per pair
/// where the count is a multiple of the pairs, else as a reduced N/M.
Calls as_exact(const Counted& counted);

/// Where `counted` departs from `row`, one "kind: ..." phrase per kind,
/// joined by "; "; empty when every kind's count is what its rate allows (an
/// exact rate needs `pairs` to be a multiple of its M) and no other kind was
/// called.
std::string departures(const Calls& row, const Counted& counted);

/// One configuration's result: its name (the table's first cell) and counts.
struct Measured {
  std::string configuration;
  Counted counted;
};

/// The measured configurations against the table's rows whose names start
/// with `prefix` (each executable measures its own; "" for every row): the
/// differences, one line each, then the rows the table should hold (every
/// kind as exact: a time-driven kind's cell says \u2264N/ms instead, by
/// hand). Empty when they agree.
std::string compare(const std::vector<Row>& table, const std::vector<Measured>& measured,
                    const std::string& prefix = "");

}  // namespace sova::budget
