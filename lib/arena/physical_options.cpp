#include "arena/physical_options.hpp"

#include <algorithm>
#include <string>

namespace sova::detail {

PhysicalProps physical_props_for(const PhysicalOptions& options, const DeviceInfo& info) {
  PhysicalProps props;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = options.device;
  constexpr unsigned kKnown = cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;
  if ((options.handle_types & ~kKnown) != 0) {
    throw Error("sova: unknown handle type bits " + std::to_string(options.handle_types), cudaErrorInvalidValue);
  }
  if ((options.handle_types & cudaMemHandleTypeFabric) != 0) {
    throw Error(std::string("sova: fabric handles are not supported by sova (device ") + info.name + " reports " +
                    (info.fabric_supported ? "support" : "no support") + "; docs/ipc.md)",
                cudaErrorNotSupported);
  }
  if ((options.handle_types & cudaMemHandleTypePosixFileDescriptor) != 0 && !info.posix_fd_supported) {
    throw Error(std::string("sova: device ") + info.name + " cannot export POSIX file descriptors",
                cudaErrorNotSupported);
  }
  props.handle_types = options.handle_types;
  if (options.host_numa_node < -1) {
    throw Error("sova: host_numa_node must be -1 (device memory) or a NUMA node", cudaErrorInvalidValue);
  }
  if (options.host_numa_node >= 0) {
    if (!info.host_numa_vmm_supported) {
      throw Error(std::string("sova: device ") + info.name + " does not support host-NUMA memory under VMM",
                  cudaErrorNotSupported);
    }
    props.location.type = cudaMemLocationTypeHostNuma;
    props.location.id = options.host_numa_node;
  }
  if (options.compressible) {
    if (!info.compression_supported) {
      throw Error(std::string("sova: device ") + info.name + " does not support generic compression",
                  cudaErrorNotSupported);
    }
    if (options.host_numa_node >= 0) {
      throw Error("sova: compression applies to device memory, not a host memory pool", cudaErrorNotSupported);
    }
    props.compressible = true;
  }
  return props;
}

DeviceInfo for_physical_options(Driver& driver, DeviceInfo info, const PhysicalOptions& options) {
  const PhysicalProps props = physical_props_for(options, info);
  if (props.location.type == cudaMemLocationTypeDevice && props.handle_types == 0 && !props.compressible) {
    return info;  // plain device memory: the device's own granularity
  }
  std::size_t g = 0;
  const cudaError_t error = driver.granularity_for(props, &g);
  if (error != cudaSuccess) {
    throw Error(std::string("sova: granularity query for the pool's memory failed: ") + cudaGetErrorName(error), error);
  }
  info.granularity = std::max(info.granularity, g);
  return info;
}

}  // namespace sova::detail
