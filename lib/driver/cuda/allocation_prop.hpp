// sova — the properties every sova chunk is created with.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <sova/driver.hpp>

namespace sova::cuda_detail {

/// Pinned device memory on `device`, no shareable handle (IPC export will
/// request one later), and GPUDirect RDMA capability requested when the device
/// supports it under VMM, so a NIC can register pool memory as it can
/// cudaMalloc memory (PyTorch's expandable segments and NCCL do the same; the
/// flag is a request and never makes a create fail). Granularity is queried
/// with these same properties, so it is exactly the one creates must respect.
/// Needs the driver loaded and a valid ordinal; no context.
cudaError_t allocation_prop(int device, CUmemAllocationProp* out) noexcept;

/// The same for `props`: its location (a device, or pinned memory on a host
/// NUMA node, where RDMA is not requested), the shareable handle types it
/// asks for, and generic compression if requested. cudaErrorInvalidValue for
/// a location or handle type the driver has no counterpart for.
cudaError_t allocation_prop(const PhysicalProps& props, CUmemAllocationProp* out) noexcept;

/// What the driver reports for an allocation, back in sova's terms.
PhysicalProps physical_props_of(const CUmemAllocationProp& prop) noexcept;

}  // namespace sova::cuda_detail
