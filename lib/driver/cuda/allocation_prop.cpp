#include "driver/cuda/allocation_prop.hpp"

#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"

namespace sova::cuda_detail {

cudaError_t allocation_prop(int device, CUmemAllocationProp* out) noexcept {
  const EntryPoints& cu = entry_points();
  CUdevice dev = 0;
  if (CUresult r = cu.device_get(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);
  int rdma = 0;
  if (CUresult r = cu.device_get_attribute(
          &rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev);
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

}  // namespace sova::cuda_detail
