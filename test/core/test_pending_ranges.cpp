// PendingRanges (lib/core/pending_ranges.hpp): the ranges a stream freed
// whose frees are not yet known complete, against a byte-per-unit model.
#include "support/catch.hpp"

#include "core/pending_ranges.hpp"

#include <algorithm>
#include <random>
#include <vector>

using sova::detail::PendingRanges;

TEST_CASE("pending ranges: overlapping frees merge with the later epoch, touching ones stay apart", "[core][pending]") {
  PendingRanges ranges;
  CHECK(ranges.empty());
  CHECK(ranges.latest_overlapping(0, 1 << 20) == 0);
  ranges.add(1024, 1024, 3);  // [1024, 2048) epoch 3
  ranges.add(2048, 512, 4);   // touching: a range of its own
  CHECK(ranges.count() == 2);
  CHECK(ranges.bytes() == 1536);
  CHECK(ranges.latest_overlapping(0, 1024) == 0);  // ends where the first begins
  CHECK(ranges.latest_overlapping(1536, 512) == 3);
  CHECK(ranges.latest_overlapping(1536, 1024) == 4);
  CHECK(ranges.end_of_overlapping(0, 1536) == 2048);
  CHECK(ranges.end_of_overlapping(0, 4096) == 2560);
  CHECK(ranges.end_of_overlapping(2560, 512) == 0);
  ranges.add(1536, 2048, 2);  // overlaps both: one range, epoch 4
  CHECK(ranges.count() == 1);
  CHECK(ranges.bytes() == 3584 - 1024);
  CHECK(ranges.latest_overlapping(3000, 1) == 4);
  ranges.drop_complete(3);
  CHECK(ranges.count() == 1);  // epoch 4 is not complete yet
  ranges.drop_complete(4);
  CHECK(ranges.empty());
  CHECK(ranges.bytes() == 0);
}

namespace {

// The reference: ranges in a plain vector, merged by the same contract.
struct ModelRange {
  std::size_t start, end;
  std::uint64_t epoch;
};

void model_add(std::vector<ModelRange>& model, std::size_t start, std::size_t end, std::uint64_t epoch) {
  std::vector<ModelRange> kept;
  for (const ModelRange& r : model) {
    if (r.start < end && start < r.end) {
      start = std::min(start, r.start);
      end = std::max(end, r.end);
      epoch = std::max(epoch, r.epoch);
    } else {
      kept.push_back(r);
    }
  }
  kept.push_back(ModelRange{start, end, epoch});
  model = kept;
}

}  // namespace

TEST_CASE("pending ranges agree with a model under random frees and completions", "[core][pending]") {
  constexpr std::size_t kUnits = 256;  // of 512 bytes
  std::vector<ModelRange> model;
  // Safety, independent of the merging: the latest epoch each unit was freed
  // in; the unit must read as pending until that epoch completes.
  std::vector<std::uint64_t> freed_in(kUnits, 0);
  PendingRanges ranges;
  std::mt19937_64 rng(11);
  std::uint64_t epoch = 1, safe = 0;
  for (int step = 0; step < 4000; ++step) {
    if (rng() % 4 == 0) {
      safe = std::min(epoch, safe + rng() % 3);
      ranges.drop_complete(safe);
      model.erase(std::remove_if(model.begin(), model.end(), [&](const ModelRange& r) { return r.epoch <= safe; }),
                  model.end());
    } else {
      const std::size_t first = rng() % kUnits;
      const std::size_t units = 1 + rng() % std::min<std::size_t>(16, kUnits - first);
      ranges.add(first * 512, units * 512, epoch);
      model_add(model, first * 512, (first + units) * 512, epoch);
      for (std::size_t u = first; u < first + units; ++u) freed_in[u] = epoch;
      if (rng() % 3 == 0) ++epoch;
    }
    std::size_t model_bytes = 0;
    for (const ModelRange& r : model) model_bytes += r.end - r.start;
    REQUIRE(ranges.bytes() == model_bytes);
    REQUIRE(ranges.count() == model.size());
    for (std::size_t u = 0; u < kUnits; ++u) {
      std::uint64_t expected = 0;
      std::size_t expected_end = 0;
      for (const ModelRange& r : model) {
        if (r.start <= u * 512 && u * 512 < r.end) {
          expected = r.epoch;
          expected_end = r.end;
        }
      }
      REQUIRE(ranges.latest_overlapping(u * 512, 512) == expected);
      REQUIRE(ranges.end_of_overlapping(u * 512, 512) == expected_end);
      if (freed_in[u] > safe) REQUIRE(expected >= freed_in[u]);  // never complete early
    }
  }
}

TEST_CASE(
    "pending ranges asked about rarely: a unit reads pending until its latest free completes, "
    "and never without a free",
    "[core][pending]") {
  // The slow path of a stream alone in its pool adds and drops ranges without
  // asking about them (they are staged); queries come now and then. Whatever
  // was merged or dropped meanwhile, every unit freed in an epoch not yet
  // complete must read as pending with at least that epoch, and a unit never
  // freed must not read as pending.
  constexpr std::size_t kUnits = 256;  // of 512 bytes
  std::vector<std::uint64_t> freed_in(kUnits, 0);
  std::vector<bool> ever_freed(kUnits, false);
  PendingRanges ranges;
  std::mt19937_64 rng(23);
  std::uint64_t epoch = 1, safe = 0;
  int queried = 0;
  for (int step = 0; step < 20000; ++step) {
    if (rng() % 8 == 0) {
      // Completion lags the epochs by a few (as a busy stream's fences do).
      safe = std::min(epoch - 1, safe + rng() % 3);
      ranges.drop_complete(safe);
    } else {
      const std::size_t first = rng() % (kUnits / 2);  // the upper half is never freed
      const std::size_t units = 1 + rng() % std::min<std::size_t>(16, kUnits / 2 - first);
      ranges.add(first * 512, units * 512, epoch);
      for (std::size_t u = first; u < first + units; ++u) {
        freed_in[u] = epoch;
        ever_freed[u] = true;
      }
      if (rng() % 2 == 0) ++epoch;
    }
    if (rng() % 50 != 0) continue;
    ++queried;
    bool any_pending = false;
    for (std::size_t u = 0; u < kUnits; ++u) {
      const std::uint64_t latest = ranges.latest_overlapping(u * 512, 512);
      const std::size_t end = ranges.end_of_overlapping(u * 512, 512);
      if (freed_in[u] > safe) REQUIRE(latest >= freed_in[u]);  // never complete early
      if (!ever_freed[u]) REQUIRE(latest == 0);
      REQUIRE((latest == 0) == (end == 0));
      if (end != 0) REQUIRE(end > u * 512);
      any_pending = any_pending || latest != 0;
    }
    REQUIRE(ranges.empty() == !any_pending);
  }
  CHECK(queried > 300);
  // Everything complete: nothing is pending, and the bytes say so.
  ranges.drop_complete(epoch);
  CHECK(ranges.empty());
  CHECK(ranges.bytes() == 0);
  CHECK(ranges.count() == 0);
}

TEST_CASE("pending ranges: a range complete by its own epoch is dropped unmerged, staged or not", "[core][pending]") {
  PendingRanges ranges;
  ranges.add(0, 1024, 5);    // staged
  ranges.add(512, 1024, 9);  // overlaps it, later
  ranges.drop_complete(6);   // no query came between: the first goes alone
  CHECK(ranges.latest_overlapping(0, 512) == 0);
  CHECK(ranges.latest_overlapping(512, 512) == 9);
  CHECK(ranges.bytes() == 1024);
  // Unmerged, a query for the latest epoch reads each staged range alone.
  ranges.add(4096, 1024, 5);
  ranges.add(4608, 1024, 9);
  CHECK(ranges.latest_overlapping(4096, 512) == 5);
  // Asked where they end (a placement's question) before the drop, the two
  // merge (the conservative union) and stay together until the later epoch
  // completes.
  CHECK(ranges.end_of_overlapping(4096, 512) == 5632);
  CHECK(ranges.latest_overlapping(4096, 512) == 9);
  ranges.drop_complete(6);
  CHECK(ranges.latest_overlapping(4096, 512) == 9);
  ranges.drop_complete(9);
  CHECK(ranges.empty());
}

TEST_CASE("pending ranges of a stream whose work never completes stay bounded: staged ones merge", "[core][pending]") {
  // The same eight places freed again and again, no fence ever complete:
  // merged, that is eight ranges; staged, it would grow with every free.
  PendingRanges ranges;
  const std::size_t frees = 3 * PendingRanges::kStagedBeforeMerge;
  for (std::size_t i = 0; i < frees; ++i) {
    ranges.add((i % 8) * 4096, 4096, 1 + i / 8);
    REQUIRE(ranges.staged() <= PendingRanges::kStagedBeforeMerge + 16);
  }
  CHECK(ranges.count() == 8);
  CHECK(ranges.staged() == 0);
  for (std::size_t place = 0; place < 8; ++place) {
    // The latest free of each place: its epoch.
    CHECK(ranges.latest_overlapping(place * 4096, 4096) == (frees - 8 + place) / 8 + 1);
  }
}
