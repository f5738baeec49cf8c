// An access descriptor for a device (cudaMemPoolSetAccess, cuMemSetAccess
// and the simulation's set_access take arrays of them), for the tests of the
// simulation and of the GPU alike.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::test {

/// `flags` (none, read, read-write) for `device`.
inline cudaMemAccessDesc access_desc(int device, cudaMemAccessFlags flags) {
  cudaMemAccessDesc d{};
  d.location.type = cudaMemLocationTypeDevice;
  d.location.id = device;
  d.flags = flags;
  return d;
}

}  // namespace sova::test
