// PendingRanges (lib/core/pending_ranges.hpp): the ranges a stream freed
// whose frees are not yet known complete, against a byte-per-unit model.
#include "support/catch.hpp"

#include "core/pending_ranges.hpp"

#include <algorithm>
#include <random>
#include <vector>

using sova::detail::PendingRanges;

TEST_CASE("pending ranges: overlapping frees merge with the later epoch, touching ones stay apart",
          "[core][pending]") {
  PendingRanges ranges;
  CHECK(ranges.empty());
  CHECK(ranges.latest_overlapping(0, 1 << 20) == 0);
  ranges.add(1024, 1024, 3);                       // [1024, 2048) epoch 3
  ranges.add(2048, 512, 4);                        // touching: a range of its own
  CHECK(ranges.count() == 2);
  CHECK(ranges.bytes() == 1536);
  CHECK(ranges.latest_overlapping(0, 1024) == 0);  // ends where the first begins
  CHECK(ranges.latest_overlapping(1536, 512) == 3);
  CHECK(ranges.latest_overlapping(1536, 1024) == 4);
  CHECK(ranges.end_of_overlapping(0, 1536) == 2048);
  CHECK(ranges.end_of_overlapping(0, 4096) == 2560);
  CHECK(ranges.end_of_overlapping(2560, 512) == 0);
  ranges.add(1536, 2048, 2);                       // overlaps both: one range, epoch 4
  CHECK(ranges.count() == 1);
  CHECK(ranges.bytes() == 3584 - 1024);
  CHECK(ranges.latest_overlapping(3000, 1) == 4);
  ranges.drop_complete(3);
  CHECK(ranges.count() == 1);                      // epoch 4 is not complete yet
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
