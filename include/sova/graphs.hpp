// sova — what CUDA graphs hold of a pool (docs/graphs.md).
//
// Allocations made on a stream under graph capture belong to the graph being
// captured until that graph, every executable graph made from it, and all
// their launches are gone; these figures say how much that is. They are the
// counterpart of cudaDeviceGetGraphMemAttribute, per pool.
#pragma once

#include <cstdint>
#include <vector>

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

/// What one graph holds of a pool (Pool::graph_memory_snapshot): one entry
/// per capture that allocated, until its memory is back in the pool.
struct GraphHolding {
  /// The capture's id (cudaStreamGetCaptureInfo's id, unique in the process):
  /// read it during the capture to tell graphs apart, or compare snapshots
  /// taken before and after a capture.
  unsigned long long capture_id = 0;
  /// The capture may still be in progress (no call of the pool has seen its
  /// stream outside it since).
  bool capturing = false;
  /// Bytes and blocks the graph holds: what it allocated, and blocks of other
  /// graphs whose caller's free it captured (they stay until both are gone).
  std::uint64_t held_bytes = 0;
  std::uint64_t held_blocks = 0;
  /// Of those, the graph's outputs: allocated in it and not freed in it
  /// (valid after each launch; the caller's to free).
  std::uint64_t output_bytes = 0;
  std::uint64_t output_blocks = 0;
};

/// Every graph holding memory of a pool, by capture id.
using GraphMemorySnapshot = std::vector<GraphHolding>;

}  // namespace sova
