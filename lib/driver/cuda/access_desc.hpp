// sova — cudaMemAccessDesc (runtime) -> CUmemAccessDesc (driver).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

/// Translates one descriptor field by field (no reliance on the two enums
/// sharing values). cudaErrorInvalidValue for a location type or access flag
/// the driver has no counterpart for; *out is untouched then.
cudaError_t to_driver_access(const cudaMemAccessDesc& in, CUmemAccessDesc* out) noexcept;

}  // namespace sova::cuda_detail
