// The heap's best-fit index (lib/core/free_index.hpp) on its own, against the
// std::set by (size, offset) it replaced, in the same run:
//   heap_index/free_index/blocks:N/sizes:S
//   heap_index/std_set/blocks:N/sizes:S
// Each iteration is what a miss of the slow path does to the index: one free
// block leaves (carved or merged), one comes back with a new size, and a best
// fit looks up the smallest block of at least a size. N free blocks (the
// traces hold 10-60 at a miss, random sizes up to ~500); S = 0 draws sizes
// from 512 B to 64 MiB, S = 4 from four sizes only (long class lists: the
// index's worst case). Host only: no GPU, no driver.
#include "core/free_index.hpp"
#include "core/node_cache.hpp"

#include <benchmark/benchmark.h>

#include <deque>
#include <random>
#include <set>
#include <vector>

namespace sova_bench {
namespace {

using sova::detail::Block;
using sova::detail::kAlignment;

// As the pool kept it: nodes recycled through a NodeCache, no malloc a change.
struct SetIndex {
  sova::detail::NodeCache nodes;
  std::set<Block*, sova::detail::BySizeThenOffset, sova::detail::RecyclingAllocator<Block*>> set{
      sova::detail::BySizeThenOffset{}, sova::detail::RecyclingAllocator<Block*>(&nodes)};
  void insert(Block* b) { set.insert(b); }
  void erase(Block* b) { set.erase(b); }
  Block* lower_bound(std::size_t size) const {
    auto it = set.lower_bound(size);
    return it == set.end() ? nullptr : *it;
  }
};

struct TlsfIndex {
  sova::detail::FreeIndex index;
  void insert(Block* b) { index.insert(b); }
  void erase(Block* b) { index.erase(b); }
  Block* lower_bound(std::size_t size) const {
    auto it = index.lower_bound(size);
    return it == index.end() ? nullptr : *it;
  }
};

template <class Index>
void heap_index(benchmark::State& state) {
  const auto blocks_count = static_cast<std::size_t>(state.range(0));
  const auto sizes = static_cast<std::size_t>(state.range(1));
  std::mt19937_64 rng(7);
  auto random_size = [&]() -> std::size_t {
    if (sizes != 0) return kAlignment * (1 + (rng() % sizes) * 64);
    return kAlignment << (rng() % 18) | kAlignment * (rng() % 64);
  };
  std::deque<Block> blocks(blocks_count);
  Index index;
  for (std::size_t i = 0; i < blocks_count; ++i) {
    blocks[i].offset = i << 27;
    blocks[i].size = random_size();
    index.insert(&blocks[i]);
  }
  // Drawn ahead: the loop times the index, not the generator.
  std::vector<std::size_t> picks(4096), new_sizes(4096), probes(4096);
  for (std::size_t i = 0; i < picks.size(); ++i) {
    picks[i] = rng() % blocks_count;
    new_sizes[i] = random_size();
    probes[i] = random_size();
  }
  std::size_t i = 0;
  for (auto _ : state) {
    Block* b = &blocks[picks[i]];
    index.erase(b);
    b->size = new_sizes[i];
    index.insert(b);
    benchmark::DoNotOptimize(index.lower_bound(probes[i]));
    i = (i + 1) % picks.size();
  }
  state.SetItemsProcessed(state.iterations());
}

void index_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"blocks", "sizes"});
  for (const int blocks : {64, 512}) {
    for (const int sizes : {0, 4}) b->Args({blocks, sizes});
  }
}

BENCHMARK_TEMPLATE(heap_index, TlsfIndex)->Name("heap_index/free_index")->Apply(index_args);
BENCHMARK_TEMPLATE(heap_index, SetIndex)->Name("heap_index/std_set")->Apply(index_args);

}  // namespace
}  // namespace sova_bench
