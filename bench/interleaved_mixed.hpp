// threads_mixed's loop (threads_mixed.hpp) with its streams interleaved on one
// host thread, on a sova::Pool: each stream holds kWindow live blocks of
// 256 B + k x 4 KiB (k uniform below `classes`), and in turn frees one at
// random and allocates a random size in its place. One thread makes the
// interleaving repeatable where threads on a small host are not. Shared by
// sova_sim_mixed (bench/sim_mixed.cpp) and the miss-rule test
// (test/core/test_small_pool_streams.cpp), so the test checks the loop the
// tool measures.
#pragma once

#include <sova/pool.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace sova_bench {

class InterleavedMixed {
 public:
  static constexpr std::size_t kWindow = 8;

  /// Allocates every stream's window (the pool throws as allocate does).
  InterleavedMixed(sova::Pool& pool, std::vector<cudaStream_t> streams, std::size_t classes, std::uint32_t seed = 1234)
      : pool_(pool), streams_(std::move(streams)), classes_(classes), rng_(seed), live_(streams_.size()) {
    for (std::size_t s = 0; s < streams_.size(); ++s)
      for (void*& p : live_[s]) p = pool_.allocate(next_size(), streams_[s]);
  }
  InterleavedMixed(const InterleavedMixed&) = delete;
  InterleavedMixed& operator=(const InterleavedMixed&) = delete;

  /// `pairs` frees and allocations, the streams taking turns.
  void run(std::size_t pairs) {
    for (std::size_t i = 0; i < pairs; ++i) {
      const std::size_t s = i % streams_.size();
      void*& slot = live_[s][rng_() % kWindow];
      pool_.deallocate(slot, streams_[s]);
      slot = pool_.allocate(next_size(), streams_[s]);
    }
  }
  /// Frees every live block, each on its stream.
  void free_all() {
    for (std::size_t s = 0; s < streams_.size(); ++s)
      for (void*& p : live_[s]) {
        pool_.deallocate(p, streams_[s]);
        p = nullptr;
      }
  }

  /// Allocations between two snapshots that the streams' caches did not serve.
  static std::uint64_t misses(const sova::PoolStats& before, const sova::PoolStats& after) {
    return (after.allocations - after.fast_path_hits) - (before.allocations - before.fast_path_hits);
  }

 private:
  std::size_t next_size() { return 256 + (rng_() % classes_) * std::size_t{4096}; }

  sova::Pool& pool_;
  std::vector<cudaStream_t> streams_;
  std::size_t classes_;
  std::mt19937 rng_;
  std::vector<std::array<void*, kWindow>> live_;
};

}  // namespace sova_bench
