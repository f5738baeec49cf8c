// sova — what CUDA graphs hold of a pool (docs/graphs.md).
//
// Allocations made on a stream under graph capture belong to the graph being
// captured until that graph, every executable graph made from it, and all
// their launches are gone; these figures say how much that is. They are the
// counterpart of cudaDeviceGetGraphMemAttribute, per pool.
#pragma once

#include <cstdint>

namespace sova {

struct GraphMemoryStats {
  /// Bytes of the blocks graphs hold now (cudaGraphMemAttrUsedMemCurrent;
  /// sova's graph memory is pool memory, so also what it reserves for graphs).
  std::uint64_t held_bytes = 0;
  /// High-water mark of held_bytes (cudaGraphMemAttrUsedMemHigh), until reset.
  std::uint64_t held_bytes_high = 0;
  std::uint64_t held_blocks = 0;
  /// Graphs (captures that allocated) whose memory is not yet back in the pool.
  std::uint64_t graphs = 0;
  /// Graphs whose memory went back to the pool.
  std::uint64_t released_graphs = 0;
};

}  // namespace sova
