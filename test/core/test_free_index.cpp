// FreeIndex (lib/core/free_index.hpp): the heap's best-fit index, against a
// std::set ordered by (size, offset) — the order it must keep exactly, since
// every placement of the pool follows from it.
#include "support/catch.hpp"

#include "core/free_index.hpp"

#include <deque>
#include <iterator>
#include <random>
#include <set>
#include <vector>

using sova::detail::Block;
using sova::detail::BySizeThenOffset;
using sova::detail::FreeIndex;
using sova::detail::kAlignment;

namespace {

std::vector<Block*> forward(const FreeIndex& index) {
  std::vector<Block*> out;
  for (Block* b : index) out.push_back(b);
  return out;
}

std::vector<Block*> backward(const FreeIndex& index) {
  std::vector<Block*> out;
  for (auto it = index.rbegin(); it != index.rend(); ++it) out.push_back(*it);
  return out;
}

}  // namespace

TEST_CASE("free index: classes grow with size, exact below 8 KiB", "[core][free_index]") {
  for (std::size_t units = 1; units < 16; ++units) CHECK(FreeIndex::class_of(units * kAlignment) == units);
  std::size_t previous = 0;
  for (std::size_t size = kAlignment; size < (std::size_t{1} << 40);
       size += size / 7 / kAlignment * kAlignment + kAlignment) {
    const std::size_t klass = FreeIndex::class_of(size);
    REQUIRE(klass >= previous);
    REQUIRE(klass < FreeIndex::kClasses);
    previous = klass;
  }
  CHECK(FreeIndex::class_of(~std::size_t{0} / kAlignment * kAlignment) < FreeIndex::kClasses);
  // 16 classes an octave: 8 KiB and 8.5 KiB apart, 8 KiB and 8 KiB + 512 together.
  CHECK(FreeIndex::class_of(8192) != FreeIndex::class_of(8704));
  CHECK(FreeIndex::class_of(std::size_t{1} << 30) == FreeIndex::class_of((std::size_t{1} << 30) + 4096));
}

TEST_CASE("free index keeps a std::set's order by size then address under random inserts and erases",
          "[core][free_index]") {
  std::mt19937_64 rng(5);
  std::deque<Block> blocks(3000);  // stable addresses
  std::set<Block*, BySizeThenOffset> model;
  FreeIndex index;
  // Sizes from a few values (many equal sizes: long class lists) and from a
  // wide range (many classes, the largest far apart).
  auto random_size = [&]() -> std::size_t {
    switch (rng() % 4) {
      case 0: return kAlignment * (1 + rng() % 4);
      case 1: return std::size_t{1} << (20 + rng() % 2);
      case 2: return kAlignment * (1 + rng() % 100000);
      default: return kAlignment * (std::size_t{1} << (rng() % 40));
    }
  };
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i].offset = i * 4096 * 1024;  // unique addresses
  for (int step = 0; step < 60000; ++step) {
    Block* b = &blocks[rng() % blocks.size()];
    if (index.contains(b)) {
      REQUIRE(model.count(b) == 1);
      index.erase(b);
      model.erase(b);
      index.erase(b);  // erasing a block not in the index changes nothing
    } else {
      REQUIRE(model.count(b) == 0);
      b->size = random_size();
      index.insert(b);
      model.insert(b);
    }
    REQUIRE(index.size() == model.size());
    const std::size_t probe = random_size();
    auto expected = model.lower_bound(probe);
    auto got = index.lower_bound(probe);
    // The first few candidates, in order (what best_fit scans).
    for (int k = 0; k < 4; ++k, ++expected, ++got) {
      if (expected == model.end()) {
        REQUIRE(got == index.end());
        break;
      }
      REQUIRE(got != index.end());
      REQUIRE(*got == *expected);
    }
    if (!model.empty()) REQUIRE(*index.rbegin() == *model.rbegin());
    if (step % 997 == 0) {
      REQUIRE(forward(index) == std::vector<Block*>(model.begin(), model.end()));
      REQUIRE(backward(index) == std::vector<Block*>(model.rbegin(), model.rend()));
    }
  }
  for (Block& b : blocks) index.erase(&b);
  CHECK(index.size() == 0);
  CHECK(index.begin() == index.end());
  CHECK(index.rbegin() == index.rend());
}

TEST_CASE("free index: equal sizes go by address, whatever order they come in", "[core][free_index]") {
  Block a, b, c, big;
  a.size = b.size = c.size = 3 * kAlignment;
  a.offset = 0;
  b.offset = 1 << 20;
  c.offset = 2 << 20;
  big.size = std::size_t{64} << 20;
  big.offset = 3 << 20;
  FreeIndex index;
  index.insert(&c);
  index.insert(&big);
  index.insert(&a);
  index.insert(&b);
  CHECK(forward(index) == std::vector<Block*>{&a, &b, &c, &big});
  CHECK(*index.lower_bound(2 * kAlignment) == &a);
  CHECK(*index.lower_bound(4 * kAlignment) == &big);
  CHECK(index.lower_bound(65 << 20) == index.end());
  index.erase(&a);
  CHECK(*index.lower_bound(1) == &b);
  CHECK(*index.rbegin() == &big);
}
