// The implicit stream handles: 0 and cudaStreamLegacy (the legacy default
// stream) and cudaStreamPerThread name a stream of the calling thread's
// *current* device, not one stream for good. Every layer that must tell them
// from a created stream asks here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace sova::detail {

inline bool is_implicit_stream(cudaStream_t stream) noexcept {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

/// Whether `stream`'s value can be a stream at all, without asking the
/// driver: an implicit handle, or a value aligned like the pointer a created
/// stream's handle is (the driver's CUstream_st*, aligned to at least 8; the
/// simulation's handles too). A misaligned value (12345) names no stream;
/// the pools' stream registries also key their special states by the low
/// bits such values would collide with (stream_registry.cpp). A value that
/// passes may still name no stream: only the driver can tell
/// (core/stream_check.hpp).
inline bool may_name_stream(cudaStream_t stream) noexcept {
  return is_implicit_stream(stream) || (reinterpret_cast<std::uintptr_t>(stream) & 0x7) == 0;
}

}  // namespace sova::detail
