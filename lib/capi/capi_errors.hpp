// sova C API — turning C++ exceptions into the runtime's error codes.
//
// No exception may cross the C boundary. Every C entry point that calls
// something that can throw does so in a try block whose handler returns
// error_from_current_exception().
#pragma once

#include "capi/last_error.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <exception>
#include <new>

namespace sova::capi {

/// Call only inside a catch handler. sova's own exceptions carry the runtime's
/// code; running out of host memory is cudaErrorMemoryAllocation, as the
/// runtime reports it; anything else is cudaErrorUnknown. The exception's
/// message becomes the reason in the thread's last error (last_error.hpp).
inline cudaError_t error_from_current_exception() noexcept {
  cudaError_t code = cudaErrorUnknown;
  const char* message = nullptr;
  try {
    throw;
  } catch (const OutOfMemory& e) {
    code = e.error() != cudaSuccess ? e.error() : cudaErrorMemoryAllocation;
    message = e.what();
  } catch (const Error& e) {
    code = e.error() != cudaSuccess ? e.error() : cudaErrorUnknown;
    message = e.what();
  } catch (const std::bad_alloc&) {
    code = cudaErrorMemoryAllocation;
    message = "out of host memory";
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
  }
  note_detail(code, message);
  return code;
}

}  // namespace sova::capi
