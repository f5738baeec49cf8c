// What to tell a user whose machine has no usable NVIDIA driver or GPU. The
// runtime's own codes mislead there (cudaErrorInsufficientDriver where no
// driver exists at all), and nothing in them points to the host simulation.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::detail {

/// Whether `error`, from the CUDA driver, means no usable driver or device:
/// none installed (the runtime says cudaErrorInsufficientDriver), one older
/// than sova needs (the same code), the toolkit's stub library in its place,
/// or a driver without a device.
inline bool means_no_gpu(cudaError_t error) noexcept {
  return error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice || error == cudaErrorInitializationError ||
         error == cudaErrorStubLibrary;
}

/// The sentence every such error carries (C++ exceptions, the C API's last
/// error message, sova-info, Python).
inline constexpr const char* kNoGpuHint =
    "no NVIDIA driver or GPU was found (or the driver is older than CUDA 12); "
    "SOVA_DRIVER=sim runs sova on its host simulation, without a GPU";

}  // namespace sova::detail
