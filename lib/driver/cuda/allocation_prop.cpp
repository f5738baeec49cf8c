#include "driver/cuda/allocation_prop.hpp"

#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"

namespace sova::cuda_detail {

cudaError_t allocation_prop(int device, CUmemAllocationProp* out) noexcept {
  const EntryPoints& cu = entry_points();
  CUdevice dev = 0;
  if (CUresult r = cu.device_get(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);
  int rdma = 0;
  if (CUresult r = cu.device_get_attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev);
      r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.allocFlags.gpuDirectRDMACapable = rdma != 0 ? 1 : 0;
  *out = prop;
  return cudaSuccess;
}

cudaError_t allocation_prop(const PhysicalProps& props, CUmemAllocationProp* out) noexcept {
  CUmemAllocationProp prop = {};
  switch (props.location.type) {
    case cudaMemLocationTypeDevice:
      if (const cudaError_t err = allocation_prop(props.location.id, &prop); err != cudaSuccess) return err;
      break;
    case cudaMemLocationTypeHostNuma:
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
      prop.location.id = props.location.id;
      break;
    default: return cudaErrorInvalidValue;
  }
  constexpr unsigned kKnown = cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;
  if ((props.handle_types & ~kKnown) != 0) return cudaErrorInvalidValue;
  unsigned handles = 0;
  if (props.handle_types & cudaMemHandleTypePosixFileDescriptor) handles |= CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (props.handle_types & cudaMemHandleTypeFabric) handles |= CU_MEM_HANDLE_TYPE_FABRIC;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handles);
  prop.allocFlags.compressionType = props.compressible ? CU_MEM_ALLOCATION_COMP_GENERIC : CU_MEM_ALLOCATION_COMP_NONE;
  // Compressible memory is not requested RDMA-capable: a NIC reads memory
  // uncompressed, and the request for both may leave compression off.
  if (props.compressible) prop.allocFlags.gpuDirectRDMACapable = 0;
  *out = prop;
  return cudaSuccess;
}

PhysicalProps physical_props_of(const CUmemAllocationProp& prop) noexcept {
  PhysicalProps p;
  p.location.type =
      prop.location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ? cudaMemLocationTypeHostNuma : cudaMemLocationTypeDevice;
  p.location.id = prop.location.id;
  const unsigned handles = static_cast<unsigned>(prop.requestedHandleTypes);
  if (handles & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) p.handle_types |= cudaMemHandleTypePosixFileDescriptor;
  if (handles & CU_MEM_HANDLE_TYPE_FABRIC) p.handle_types |= cudaMemHandleTypeFabric;
  p.compressible = prop.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
  return p;
}

}  // namespace sova::cuda_detail
