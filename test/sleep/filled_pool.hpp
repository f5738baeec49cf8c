// How most sleep and wake cases start: a pool on the simulation, a stream,
// blocks of assorted sizes filled with their patterns, and what the pool
// reserved for them, the amount that sleep gives back and wake maps again.
// The cases end with sleep_checks.hpp.
#pragma once

#include "sleep/sleep_test_util.hpp"

#include <cstdint>
#include <vector>

namespace sova::sleep_test {

/// A pool of default options on `sim` holding allocate_filled's blocks,
/// allocated on a stream of its own. The members are public so that a case
/// names them as locals (`auto& [pool, stream, blocks, reserved] = start;`).
/// The case frees the blocks and destroys the stream (free_blocks_and_stream);
/// the pool is destroyed with this object, so `sim` must outlive it.
struct FilledPool {
  Pool pool;
  cudaStream_t stream;
  std::vector<Filled> blocks;
  std::uint64_t reserved;  ///< the pool's reserved_current once the blocks were allocated

  explicit FilledPool(SimDriver& sim)
      : pool(default_options(sim)),
        stream(sim.create_stream()),
        blocks(allocate_filled(pool, stream)),
        reserved(pool.stats().reserved_current) {}

 private:
  static PoolOptions default_options(SimDriver& sim) {
    PoolOptions options;
    options.driver = &sim;
    return options;
  }
};

}  // namespace sova::sleep_test
