// SizeBins (lib/core/size_bins.hpp): a stream's exact-size cache, against a
// model (one LIFO list per size), and the sweep that keeps its table the
// size of what it caches.
#include "support/catch.hpp"

#include "core/size_bins.hpp"

#include <deque>
#include <map>
#include <random>
#include <vector>

using sova::detail::Block;
using sova::detail::SizeBins;

TEST_CASE("size bins: pop gives the last block pushed of exactly that size", "[core][bins]") {
  std::deque<Block> storage(4000);
  std::map<std::size_t, std::vector<Block*>> model;
  SizeBins bins;
  std::mt19937_64 rng(5);
  std::size_t next = 0, bytes = 0, blocks = 0;
  for (int step = 0; step < 200000; ++step) {
    const std::size_t size = (1 + rng() % 300) * 512;
    if (rng() % 2 == 0 && next < storage.size()) {
      Block* b = &storage[next++];
      b->size = size;
      bins.push(b);
      model[size].push_back(b);
      bytes += size;
      ++blocks;
    } else {
      Block* got = bins.pop(size);
      auto& list = model[size];
      if (list.empty()) {
        REQUIRE(got == nullptr);
      } else {
        REQUIRE(got == list.back());
        list.pop_back();
        bytes -= size;
        --blocks;
        storage.emplace_back();  // a fresh block for later pushes
      }
    }
    REQUIRE(bins.bytes() == bytes);
    REQUIRE(bins.blocks() == blocks);
  }
}

TEST_CASE("size bins: a sweep takes what it is told, keeps the rest, and shrinks a table of stale sizes",
          "[core][bins]") {
  constexpr std::size_t kSizes = 5000;  // a stream that freed ever new sizes
  std::vector<Block> storage(kSizes);
  SizeBins bins;
  for (std::size_t i = 0; i < kSizes; ++i) {
    storage[i].size = (i + 1) * 512;
    storage[i].epoch = i % 10;
    bins.push(&storage[i]);
  }
  const std::size_t grown = bins.capacity();
  CHECK(grown >= 2 * kSizes);
  // Take all but the blocks of epoch 0 (one in ten).
  std::size_t taken = 0;
  bins.extract_if_not([](Block* b, bool) { return b->epoch == 0; }, [&](Block* b) {
    CHECK(b->epoch != 0);
    ++taken;
  });
  CHECK(taken == kSizes - kSizes / 10);
  CHECK(bins.blocks() == kSizes / 10);
  CHECK(bins.capacity() < grown / 4);  // 500 lists left: a table for them, not for 5000
  for (std::size_t i = 0; i < kSizes; ++i) {
    Block* got = bins.pop((i + 1) * 512);
    CHECK(got == (i % 10 == 0 ? &storage[i] : nullptr));
  }
  CHECK(bins.blocks() == 0);
  CHECK(bins.bytes() == 0);
}

TEST_CASE("size bins: sizes allocated again after a free are marked recurring, and keep their keys",
          "[core][bins]") {
  std::vector<Block> storage(3);
  SizeBins bins;
  bins.note_allocation(4096);  // never freed here: no key, nothing to mark
  storage[0].size = 4096;
  storage[1].size = 8192;
  storage[2].size = 4096;
  bins.push(&storage[0]);
  bins.push(&storage[1]);
  bins.note_allocation(4096);  // freed before, allocated again: recurring
  bins.push(&storage[2]);
  std::vector<std::size_t> one_off;
  bins.extract_if_not([](Block*, bool recurring) { return recurring; },
                      [&](Block* b) { one_off.push_back(b->size); });
  CHECK(one_off == std::vector<std::size_t>{8192});
  CHECK(bins.pop(4096) == &storage[2]);
  CHECK(bins.pop(4096) == &storage[0]);
  // A sweep that shrinks the table drops empty lists, recurring or not: the
  // mark is for sizes in use, not a record of every size that ever recurred.
  std::vector<Block> many(200);
  for (std::size_t i = 0; i < many.size(); ++i) {
    many[i].size = (100 + i) * 512;
    bins.push(&many[i]);
  }
  const std::size_t grown = bins.capacity();
  bins.extract_if_not([](Block*, bool recurring) { return recurring; }, [](Block*) {});
  CHECK(bins.capacity() < grown);
  bool recurring_seen = true;
  bins.push(&storage[0]);
  bins.extract_if_not([&](Block* b, bool recurring) {
    recurring_seen = b == &storage[0] && recurring;
    return true;
  }, [](Block*) {});
  CHECK_FALSE(recurring_seen);
}
