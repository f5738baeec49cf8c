// sova C API — turning C++ exceptions into the runtime's error codes.
//
// No exception may cross the C boundary. Every C entry point that calls
// something that can throw does so in a try block whose handler returns
// error_from_current_exception().
#pragma once

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <new>

namespace sova::capi {

/// Call only inside a catch handler. sova's own exceptions carry the runtime's
/// code; running out of host memory is cudaErrorMemoryAllocation, as the
/// runtime reports it; anything else is cudaErrorUnknown.
inline cudaError_t error_from_current_exception() noexcept {
  try {
    throw;
  } catch (const OutOfMemory& e) {
    return e.error() != cudaSuccess ? e.error() : cudaErrorMemoryAllocation;
  } catch (const Error& e) {
    return e.error() != cudaSuccess ? e.error() : cudaErrorUnknown;
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  } catch (...) {
    return cudaErrorUnknown;
  }
}

}  // namespace sova::capi
