// sova C API — the calling thread's last error message
// (sovaGetLastErrorMessage), so that a C user can learn what a returned code
// means here: which call failed, and why where sova knows ("already freed",
// "inside a block allocated at ...", "no NVIDIA driver or GPU was found").
//
// Every entry point of sova.h passes its result through checked() (or, on
// the hot paths, calls record_error itself on failure). A failure deeper
// down that knows more than its code (an exception's message, a refused
// free's pointer) leaves it with note_detail() before returning the code;
// record_error then uses it if the code matches.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::capi {

/// Keeps `text` as the reason for the next record_error() with `error` on
/// this thread (replacing any earlier one). Truncated to the buffer.
void note_detail(cudaError_t error, const char* text) noexcept;

/// Whether a detail for `error` is noted on this thread and not yet used by
/// record_error (so that a caller with fewer words leaves it).
bool detail_noted(cudaError_t error) noexcept;

/// Makes "`function`: <reason>" this thread's last error message and returns
/// `error`. The reason is the detail noted for `error` if any, else the code's
/// name and description; where the code means no usable driver or GPU, the
/// hint that SOVA_DRIVER=sim runs the simulation is added.
[[gnu::cold, gnu::noinline]] cudaError_t record_error(const char* function, cudaError_t error) noexcept;

/// `error`, recorded first when it is a failure. For the entry points.
inline cudaError_t checked(const char* function, cudaError_t error) noexcept {
  if (error != cudaSuccess) [[unlikely]]
    return record_error(function, error);
  return error;
}

/// This thread's last error message; "" when no sova call failed on it.
const char* last_error_message() noexcept;

}  // namespace sova::capi
