// sova — the properties every sova chunk is created with.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

/// Pinned device memory on `device`, no shareable handle (IPC export will
/// request one later), and GPUDirect RDMA capability requested when the device
/// supports it under VMM, so a NIC can register pool memory as it can
/// cudaMalloc memory (PyTorch's expandable segments and NCCL do the same; the
/// flag is a request and never makes a create fail). Granularity is queried
/// with these same properties, so it is exactly the one creates must respect.
/// Needs the driver loaded and a valid ordinal; no context.
cudaError_t allocation_prop(int device, CUmemAllocationProp* out) noexcept;

}  // namespace sova::cuda_detail
