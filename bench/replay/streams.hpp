// replay/ — the streams a trace replays on: the trace's stream 0 is the
// legacy default stream (handle 0, of CUDA or of the allocator's sim), every
// other trace stream a non-blocking stream created for the replay
// (common.hpp's Stream), in the world the allocator takes (A::sim).
#pragma once

#include "../common.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sova_bench {

class ReplayStreams {
 public:
  /// One stream per entry of `trace_streams` (Trace::streams), index for
  /// index. Throws std::runtime_error when a stream cannot be created.
  ReplayStreams(sova::SimDriver* sim, const std::vector<std::uint64_t>& trace_streams);

  cudaStream_t operator[](std::uint32_t index) const { return handles_[index]; }
  std::size_t size() const { return handles_.size(); }

  /// Waits for every stream's work, the legacy stream's included; throws
  /// std::runtime_error on an error.
  void sync() const;

 private:
  sova::SimDriver* sim_;
  std::vector<std::unique_ptr<Stream>> owned_;  // destroyed with this object
  std::vector<cudaStream_t> handles_;
};

}  // namespace sova_bench
