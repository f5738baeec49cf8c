// sova — calling the CUDA runtime without disturbing its last-error state.
//
// A failing runtime call records its error as the thread's "last error"
// (cudaGetLastError). The C API promises not to change that state, and a
// pool that fails an event query or a memory query on the caller's behalf
// must not leave an error for the caller's next cudaGetLastError to find.
// So: if the state was clean before the call, it is made clean again after.
// If it already held an error we leave it (the runtime has no way to put an
// earlier error back). Sticky errors cannot be cleared and stay, as they
// should. Cost: one cudaPeekAtLastError (a thread-local read), on calls that
// are never on the allocator's fast path.
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

namespace sova::cuda_detail {

template <class Call>
cudaError_t quiet(Call&& call) noexcept {
  const bool was_clean = cudaPeekAtLastError() == cudaSuccess;
  const cudaError_t result = std::forward<Call>(call)();
  if (result != cudaSuccess && was_clean) (void)cudaGetLastError();
  return result;
}

}  // namespace sova::cuda_detail
