// replay/ — what a replay reads from an allocator between operations to draw
// its memory over time (timeline.hpp), where the allocator can tell.
//
// An allocator A offers it by an overload, found by argument-dependent lookup
// in namespace sova_bench:
//
//   MemoryNow memory_now(A& a);   // the allocator's figures at this moment
//
// (free functions rather than members of the allocators in allocators.hpp, so
// that those stay as they are: replay.cpp defines them for sova's and CUDA's
// allocators, bench/torch/torch_allocator.cpp for PyTorch's). An allocator
// without one replays as well, with no timeline.
#pragma once

#include <cstdint>

namespace sova_bench {

/// Current figures, in bytes, as the allocator counts them (the "current"
/// twins of PeakFigures: cudaMemPoolAttrReservedMemCurrent / UsedMemCurrent).
struct MemoryNow {
  std::uint64_t reserved = 0;  ///< physical memory held
  std::uint64_t used = 0;      ///< bytes handed out
};

}  // namespace sova_bench
