// sova C API — sovaDeviceGetVmmSupport: the device's VMM capabilities and
// what sova does with them. Asks the query driver (the pools' driver once
// one exists): no context, no pool.
#include "capi/last_error.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/pool.hpp>
#include <sova/sova.h>

#include <cstring>

using namespace sova::capi;

static cudaError_t sovaDeviceGetVmmSupport_unchecked(sovaVmmSupport* support, int device) {
  if (support == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_device(device, cudaErrorInvalidDevice); err != cudaSuccess) return err;
  sova::DeviceInfo info;
  if (const cudaError_t err = query_driver().device_info(device, &info); err != cudaSuccess) return err;
  sovaVmmSupport s;
  std::memset(&s, 0, sizeof s);
  std::memcpy(s.name, info.name, sizeof s.name);
  s.name[sizeof s.name - 1] = '\0';
  s.totalMemory = info.total_memory;
  s.vmm = info.vmm_supported;
  s.posixFd = info.posix_fd_supported;
  s.fabric = info.fabric_supported;
  s.compression = info.compression_supported;
  s.multicast = info.multicast_supported;
  s.rdmaWithVmm = info.rdma_with_vmm_supported;
  s.hostNumaVmm = info.host_numa_vmm_supported;
  s.hostNumaId = info.host_numa_id;
  s.granularityMinimum = info.granularity;
  s.granularityRecommended = info.recommended_granularity;
  // What sova's pools accept: the same tests sovaMemPoolCreate makes
  // (lib/arena/physical_options.cpp).
  s.sovaPools = info.vmm_supported;
  if (info.vmm_supported) {
    s.sovaHandleTypes = info.posix_fd_supported ? cudaMemHandleTypePosixFileDescriptor : 0;  // fabric: not built
    s.sovaCompression = info.compression_supported;
    s.sovaHostPools = info.host_numa_vmm_supported;
    s.sovaRdma = info.rdma_with_vmm_supported;  // chunks request it where supported (allocation_prop.hpp)
    s.sovaChunkBytes = sova::PoolOptions{}.max_chunk;
  }
  s.sovaMulticast = 0;
  *support = s;
  return cudaSuccess;
}
cudaError_t sovaDeviceGetVmmSupport(sovaVmmSupport* support, int device) {
  return checked(__func__, sovaDeviceGetVmmSupport_unchecked(support, device));
}

static cudaError_t sovaMemGetAllocationProperties_unchecked(sovaAllocationProperties* props, const void* ptr) {
  if (props == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
  sova::PhysicalProps p;
  {
    sova::capi::ReadSection section;
    PoolEntry* e = g_state.owners.find(ptr);
    if (e == nullptr) return cudaErrorInvalidValue;
    if (const cudaError_t err = e->pool.properties(ptr, &p); err != cudaSuccess) return err;
  }
  sovaAllocationProperties out;
  std::memset(&out, 0, sizeof out);
  out.location = p.location;
  out.handleTypes = p.handle_types;
  out.compressed = p.compressible ? 1 : 0;
  *props = out;
  return cudaSuccess;
}
cudaError_t sovaMemGetAllocationProperties(sovaAllocationProperties* props, const void* ptr) {
  return checked(__func__, sovaMemGetAllocationProperties_unchecked(props, ptr));
}
