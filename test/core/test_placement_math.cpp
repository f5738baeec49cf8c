// The built-in policies' arithmetic (lib/core/placement.hpp), exhaustively
// over small sizes and sampled over large ones.
#include "support/catch.hpp"

#include "core/placement.hpp"

#include <random>
#include <set>

using namespace sova;
using namespace sova::detail;

TEST_CASE("size classes: four per power of two, at most 25% over, monotonic", "[core][policy]") {
  std::set<std::size_t> classes_in_8k_16k;
  std::size_t previous = 0;
  for (std::size_t bytes = 1; bytes <= (std::size_t{4} << 20); bytes += (bytes < 65536 ? 1 : 4093)) {
    const std::size_t size = round_to_class(bytes);
    REQUIRE(size >= bytes);
    REQUIRE(size % 512 == 0);
    REQUIRE(size >= previous);
    if (bytes > 2048) REQUIRE(size - bytes <= bytes / 4 + 512);
    REQUIRE(round_to_class(size) == size);  // a class rounds to itself
    if (bytes > 8192 && bytes <= 16384) classes_in_8k_16k.insert(size);
    previous = size;
  }
  CHECK(classes_in_8k_16k == std::set<std::size_t>{10240, 12288, 14336, 16384});
}

TEST_CASE("the default rounds to size classes up to kSmallClassLimit, exactly above", "[core][policy]") {
  CHECK(round_default(1) == 512);
  CHECK(round_default(4500) == 5120);  // a class
  CHECK(round_default(kSmallClassLimit) == kSmallClassLimit);
  CHECK(round_default(kSmallClassLimit - 1000) == kSmallClassLimit);
  CHECK(round_default(kSmallClassLimit + 1) == kSmallClassLimit + 512);  // exact from here
  CHECK(round_default(300000) == 300032);
  CHECK(default_placement_policy()->block_size(4500) == 5120);  // the policy object agrees
  CHECK(default_placement_policy()->block_size(300000) == 300032);
}

TEST_CASE("buddy sizes are powers of two, at least 512", "[core][policy]") {
  CHECK(round_to_power_of_two(1) == 512);
  CHECK(round_to_power_of_two(513) == 1024);
  CHECK(round_to_power_of_two(std::size_t{5} << 20) == std::size_t{8} << 20);
  CHECK(round_to_power_of_two(std::size_t{8} << 20) == std::size_t{8} << 20);
}

TEST_CASE("placements stay inside their range and keep their rules", "[core][policy]") {
  const std::size_t granule = std::size_t{2} << 20;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const FreeRange range{(rng() % 4096) * 512, (1 + rng() % 16384) * 512};
    const std::size_t size = (1 + rng() % 8192) * 512;
    const std::size_t start = place_at_start(range, size);
    const std::size_t slab = place_in_one_granule(range, size, granule);
    const std::size_t buddy = place_size_aligned(range, round_to_power_of_two(size));
    for (const std::size_t at : {start, slab}) {
      if (at == PlacementPolicy::kNoFit) continue;
      REQUIRE(at >= range.offset);
      REQUIRE(at + size <= range.offset + range.size);
    }
    if (size <= range.size) REQUIRE(start == range.offset);
    if (slab != PlacementPolicy::kNoFit && size <= granule) REQUIRE(slab / granule == (slab + size - 1) / granule);
    // The slab rule gives up only when no position in the range would do.
    if (slab == PlacementPolicy::kNoFit && size <= range.size && size <= granule) {
      const std::size_t next_boundary = (range.offset / granule + 1) * granule;
      REQUIRE(next_boundary + size > range.offset + range.size);
    }
    if (buddy != PlacementPolicy::kNoFit) {
      const std::size_t bsize = round_to_power_of_two(size);
      REQUIRE(buddy % bsize == 0);
      REQUIRE(buddy >= range.offset);
      REQUIRE(buddy + bsize <= range.offset + range.size);
    }
  }
}
