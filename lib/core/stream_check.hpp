// judge_stream: whether a value passed as a stream is one, asked where a pool
// meets a stream value it has no state for — before it makes anything for it
// (StreamRegistry::find_slow), so that a refused stream leaves the pool as it
// was: no state, no statistic moved (docs/runtime-errors.md, "Bad input,
// route by route").
//
// A stream the pool already has a state for is not judged again here: the
// fast paths' own checks (PoolCore::allocate's stream_is_capturing and
// stream_id, deallocate's stream_is_capturing, with check_streams on) see a
// handle that stopped naming a stream since; no call is added to them.
#pragma once

#include "base/implicit_stream.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

namespace sova::detail {

/// cudaSuccess where `stream` may be used as a stream, with `*capturing`
/// whether the driver says it is being captured (false where not asked).
/// cudaErrorInvalidResourceHandle for a value that cannot name a stream
/// (may_name_stream), whatever `ask_driver`; with `ask_driver`
/// (PoolOptions::check_streams), the driver's error for a created or
/// per-thread handle it does not know (stream_is_capturing: allowed under
/// capture, and leaves a capture valid). The legacy handles are never asked
/// about: they always name a stream. Without `ask_driver`, an aligned value
/// that names no stream passes: only the driver could tell, and the caller
/// turned its questions off.
inline cudaError_t judge_stream(Driver& driver, cudaStream_t stream, bool ask_driver, bool* capturing) noexcept {
  *capturing = false;
  if (!may_name_stream(stream)) return cudaErrorInvalidResourceHandle;
  if (!ask_driver || stream == nullptr || stream == cudaStreamLegacy) return cudaSuccess;
  return driver.stream_is_capturing(stream, capturing);
}

}  // namespace sova::detail
