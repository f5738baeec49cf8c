// sova — from a pool's options to what its physical chunks are made of
// (PhysicalProps), checked against what the device supports.
#pragma once

#include <sova/driver.hpp>
#include <sova/error.hpp>
#include <sova/options.hpp>

namespace sova::detail {

/// The chunk properties `options` ask for (handle types, compression, a host
/// NUMA location). Throws sova::Error: cudaErrorInvalidValue for unknown
/// handle-type bits or a negative node other than -1; cudaErrorNotSupported
/// for what `info`'s device lacks (POSIX handles, compression, host-NUMA
/// VMM) and for fabric handles (not built: docs/ipc.md).
PhysicalProps physical_props_for(const PoolOptions& options, const DeviceInfo& info);

/// `info` checked against `options` (physical_props_for) and with the
/// granularity their chunks need (compressed or host memory may need a
/// larger one). Throws sova::Error.
DeviceInfo for_physical_options(Driver& driver, DeviceInfo info, const PoolOptions& options);

}  // namespace sova::detail
