// sova_torch — record_stream for the pluggable allocator.
//
// PyTorch's CUDAPluggableAllocator::recordStream does nothing unless a
// record_stream function is set; sova.torch.enable() sets
// sova_torch_record_stream_hook (set_record_stream_fn), so every recordStream
// reaches this table: Tensor.record_stream from Python, and C++ callers such as
// c10d's NCCL process group. The pluggable allocator frees every block on the
// stream that allocated it, so a tensor still used by a kernel on another stream
// could be reused by the allocating stream's next allocation while that kernel
// runs. The free therefore makes its stream wait for an event recorded on each
// recorded stream before freeing: then stream order alone covers the block
// (sova reuses a block on the freeing stream at once, on other streams only
// once that free is complete or waited for), at the price of a wait that
// PyTorch's own allocator avoids (it delays the reuse instead of ordering the
// streams).
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
