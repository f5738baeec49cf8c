// sova — from what an arena's physical chunks should be (PhysicalOptions:
// the part of a pool's or growable buffer's options about memory) to the
// chunks' PhysicalProps, checked against what the device supports.
#pragma once

#include <sova/driver.hpp>
#include <sova/error.hpp>

namespace sova::detail {

/// What an arena's chunks are made of. The arena's own options type, so that
/// the arena does not see the pool's (sova::PoolOptions, a layer above:
/// docs/design.md, "Layers"); the fields mean what PoolOptions' of the same
/// names do.
struct PhysicalOptions {
  int device = 0;
  unsigned handle_types = 0;
  bool compressible = false;
  int host_numa_node = -1;
};

/// The chunk properties `options` ask for (handle types, compression, a host
/// NUMA location). Throws sova::Error: cudaErrorInvalidValue for unknown
/// handle-type bits or a negative node other than -1; cudaErrorNotSupported
/// for what `info`'s device lacks (POSIX handles, compression, host-NUMA
/// VMM) and for fabric handles (not built: docs/ipc.md).
PhysicalProps physical_props_for(const PhysicalOptions& options, const DeviceInfo& info);

/// `info` checked against `options` (physical_props_for) and with the
/// granularity their chunks need (compressed or host memory may need a
/// larger one). Throws sova::Error.
DeviceInfo for_physical_options(Driver& driver, DeviceInfo info, const PhysicalOptions& options);

}  // namespace sova::detail
