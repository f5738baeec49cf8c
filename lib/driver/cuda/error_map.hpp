// sova — CUresult -> cudaError_t, the way the CUDA runtime reports driver
// failures (CUDA_ERROR_OUT_OF_MEMORY -> cudaErrorMemoryAllocation, ...), so the
// CUDA driver's methods return what the runtime would (driver.hpp contract).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

/// The runtime's error for a driver result; CUDA_SUCCESS -> cudaSuccess.
/// A result with no runtime counterpart gives cudaErrorUnknown.
cudaError_t to_runtime_error(CUresult result) noexcept;

}  // namespace sova::cuda_detail
