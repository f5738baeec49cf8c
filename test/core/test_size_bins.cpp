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
  bins.extract_if_not([](Block* b, bool) { return b->epoch == 0; },
                      [&](Block* b) {
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

TEST_CASE("size bins: sizes allocated again after a free are marked recurring, and keep their marks", "[core][bins]") {
  std::vector<Block> storage(3);
  SizeBins bins;
  bins.note_allocation(4096);  // never freed here: no key, nothing to mark
  storage[0].size = 4096;
  storage[1].size = 8192;
  storage[2].size = 4096;
  bins.push(&storage[0]);
  bins.push(&storage[1]);
  CHECK(bins.note_allocation(4096));  // freed before, allocated again: recurring
  CHECK_FALSE(bins.note_allocation(12288));
  bins.push(&storage[2]);
  std::vector<std::size_t> one_off;
  bins.extract_if_not([](Block*, bool recurring) { return recurring; }, [&](Block* b) { one_off.push_back(b->size); });
  CHECK(one_off == std::vector<std::size_t>{8192});
  CHECK(bins.pop(4096) == &storage[2]);
  CHECK(bins.pop(4096) == &storage[0]);
  // A table rebuilt for ever new sizes drops their empty lists but keeps the
  // mark of a recurring size whose list is empty (its blocks are live: the
  // mark is what keeps them cached when they come back).
  std::vector<Block> many(2000);
  for (std::size_t i = 0; i < many.size(); ++i) {
    many[i].size = (100 + i) * 512;
    bins.push(&many[i]);
  }
  bins.take_loose([](Block*) {});
  CHECK(bins.capacity() <= 256);  // 2000 stale sizes: not a table for them
  bins.push(&storage[0]);
  bool recurring_seen = false;
  bins.extract_if_not(
      [&](Block* b, bool recurring) {
        if (b == &storage[0]) recurring_seen = recurring;
        return true;
      },
      [](Block*) {});
  CHECK(recurring_seen);
}

TEST_CASE("size bins: a miss takes the loose blocks and keeps small blocks of recurring sizes", "[core][bins]") {
  const std::size_t large = sova::kSmallBlockLimit + 512;
  std::vector<Block> storage(6);
  const std::size_t sizes[] = {1024, 1024, 2048, large, large, 4096};
  for (std::size_t i = 0; i < 6; ++i) storage[i].size = sizes[i];
  SizeBins bins;
  for (Block& b : storage) bins.push(&b);
  // 1024 recurs after its blocks were cached: they move to the kept list.
  bins.note_allocation(1024);
  bins.note_allocation(large);  // recurring, but large: a miss takes it
  std::vector<Block*> taken;
  bins.take_loose([&](Block* b) { taken.push_back(b); });
  CHECK(taken.size() == 4);
  for (Block* b : taken) CHECK(b->size != 1024);
  CHECK(bins.blocks() == 2);
  CHECK(bins.bytes() == 2048);
  CHECK(bins.pop(2048) == nullptr);
  CHECK(bins.pop(large) == nullptr);
  // Pushed after the mark: kept straight away.
  storage[2].size = 1024;
  bins.push(&storage[2]);
  taken.clear();
  bins.take_loose([&](Block* b) { taken.push_back(b); });
  CHECK(taken.empty());
  CHECK(bins.pop(1024) == &storage[2]);
  bins.take_all([&](Block* b) { taken.push_back(b); });
  CHECK(taken.size() == 2);
  CHECK(bins.blocks() == 0);
  CHECK(bins.bytes() == 0);
  CHECK(bins.kept_bytes() == 0);
  CHECK(bins.pop(1024) == nullptr);
  // The size lists are whole again after the takes: LIFO as before.
  bins.push(&storage[0]);
  bins.push(&storage[1]);
  CHECK(bins.pop(1024) == &storage[1]);
  CHECK(bins.pop(1024) == &storage[0]);
}
