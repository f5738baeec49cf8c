// sova_torch — Tensor.record_stream for the pluggable allocator.
//
// PyTorch's CUDAPluggableAllocator::recordStream does nothing unless a C++
// record_stream_fn is set, which only C++ linked against libtorch can do, and
// it frees every block on the stream that allocated it. So a tensor still used
// by a kernel on another stream could be reused by the allocating stream's
// next allocation while that kernel runs. sova.torch routes
// Tensor.record_stream here (python/sova/torch.py), and the free makes its
// stream wait for an event recorded on each recorded stream before freeing:
// then stream order alone covers the block (sova reuses a block on the freeing
// stream at once, on other streams only once that free is complete or waited
// for), at the price of a wait that PyTorch's own allocator avoids (it delays
// the reuse instead of ordering the streams).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sova::torch_adapter {

/// Remembers that `stream` uses the live block at `ptr`.
void record_stream(void* ptr, cudaStream_t stream);
/// Called by the free of `ptr` on `free_stream`: inserts the waits for the
/// streams recorded for `ptr` and forgets them. Returns the waits inserted.
/// Cheap (one relaxed load) when nothing is recorded anywhere.
std::uint64_t order_recorded_streams(void* ptr, cudaStream_t free_stream) noexcept;

}  // namespace sova::torch_adapter
