// The implicit stream handles: 0 and cudaStreamLegacy (the legacy default
// stream) and cudaStreamPerThread name a stream of the calling thread's
// *current* device, not one stream for good. Every layer that must tell them
// from a created stream asks here.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::detail {

inline bool is_implicit_stream(cudaStream_t stream) noexcept {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

}  // namespace sova::detail
