#include "driver/cuda/access_desc.hpp"

namespace sova::cuda_detail {

cudaError_t to_driver_access(const cudaMemAccessDesc& in, CUmemAccessDesc* out) noexcept {
  CUmemAccessDesc d = {};
  switch (in.location.type) {
    case cudaMemLocationTypeDevice: d.location.type = CU_MEM_LOCATION_TYPE_DEVICE; break;
    case cudaMemLocationTypeHost: d.location.type = CU_MEM_LOCATION_TYPE_HOST; break;
    case cudaMemLocationTypeHostNuma: d.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA; break;
    case cudaMemLocationTypeHostNumaCurrent: d.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT; break;
    default: return cudaErrorInvalidValue;
  }
  d.location.id = in.location.id;
  switch (in.flags) {
    case cudaMemAccessFlagsProtNone: d.flags = CU_MEM_ACCESS_FLAGS_PROT_NONE; break;
    case cudaMemAccessFlagsProtRead: d.flags = CU_MEM_ACCESS_FLAGS_PROT_READ; break;
    case cudaMemAccessFlagsProtReadWrite: d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE; break;
    default: return cudaErrorInvalidValue;
  }
  *out = d;
  return cudaSuccess;
}

}  // namespace sova::cuda_detail
