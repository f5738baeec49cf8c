// The checks that end a sleep and wake case: the blocks hold their patterns
// once the stream's work is done, the blocks and the stream are given back,
// and a destroyed pool leaves nothing with the driver. Each failure names
// what failed (the block, the counter) and the line of the case that asked,
// so a case that ends in them reads as what it proves. Most cases start with
// filled_pool.hpp.
#pragma once

#include "sleep/sleep_test_util.hpp"

#include <cstddef>
#include <source_location>
#include <vector>

namespace sova::sleep_test {

// Each check takes the line of the case that called it (`where`, defaulted)
// and says it with INFO: Catch2 itself reports only the check's own line.

/// Every block holds its pattern; a block that does not is named by its
/// place in `blocks`, its size, address and seed.
inline void check_intact(const std::vector<Filled>& blocks,
                         std::source_location where = std::source_location::current()) {
  INFO("checked at " << where.file_name() << ":" << where.line());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const Filled& f = blocks[i];
    INFO("block " << i << " of " << blocks.size() << ": " << f.bytes << " bytes at " << f.ptr << ", seed " << f.seed);
    CHECK(intact(f));
  }
}

/// Waits for the work ordered on `stream` (a wake's restoring copies among
/// it), then checks every block holds its pattern.
inline void check_intact_once_synchronized(SimDriver& sim, cudaStream_t stream, const std::vector<Filled>& blocks,
                                           std::source_location where = std::source_location::current()) {
  {
    INFO("checked at " << where.file_name() << ":" << where.line());
    REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  }
  check_intact(blocks, where);
}

/// Frees every block on `stream`, then destroys the stream: the end of a case
/// whose blocks all came from `pool`.
inline void free_blocks_and_stream(Pool& pool, SimDriver& sim, cudaStream_t stream, const std::vector<Filled>& blocks) {
  for (const Filled& f : blocks) pool.deallocate(f.ptr, stream);
  sim.destroy_stream(stream);
}

/// Nothing of the pools made on `sim` is left with the driver once they are
/// destroyed: no device memory, mapping, address reservation or pinned host
/// memory (a sleep's backup: locked, or mapped).
inline void check_nothing_left_with_driver(const SimDriver& sim,
                                           std::source_location where = std::source_location::current()) {
  INFO("checked at " << where.file_name() << ":" << where.line());
  const SimCounters left = sim.counters();
  CHECK(left.physical_bytes == 0);
  CHECK(left.mappings == 0);
  CHECK(left.reservations == 0);
  CHECK(left.pinned_host_bytes == 0);
  CHECK(left.host_mapped_bytes == 0);
}

}  // namespace sova::sleep_test
