// sova — making a CUDA context current for driver calls, and putting the
// caller's back afterwards.
//
// cuMem* calls need a current context on the calling thread (the pool may
// grow from any thread, including one that never touched CUDA). We use the
// device's primary context, the one the runtime uses, so memory and streams
// stay interoperable with runtime code. The switch is done with
// cuCtxGetCurrent/cuCtxSetCurrent rather than cudaSetDevice because that
// restores *exactly* what the caller had, including "no context at all";
// cudaSetDevice(previous) would instead initialise the previous device's
// primary context (a context on GPU 0 the caller never asked for).
//
// Primary contexts are retained once per device, on first use, and never
// released: the driver object lives for the whole process. Like the
// runtime's own pools, sova pools do not survive cudaDeviceReset().
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

/// Devices beyond this ordinal are refused (cudaErrorInvalidDevice): the
/// primary-context cache is a fixed array so that it needs no destructor.
inline constexpr int kMaxDevices = 256;

/// cudaSuccess if `device` is a valid ordinal, else cudaErrorInvalidDevice
/// (or the driver's load error).
cudaError_t check_device(int device) noexcept;

/// Tag: any current context will do (calls that act on a VA range or a
/// physical handle, which the driver resolves process-wide).
struct AnyContext {};

/// RAII. Construct, check status(), make driver calls, and the destructor
/// restores the thread's previous context. Not movable; one per scope.
class ScopedContext {
 public:
  /// Makes `device`'s primary context current (initialising it if needed).
  explicit ScopedContext(int device) noexcept;
  /// Keeps the thread's current context if it has one, else makes the
  /// primary context of the runtime's current device (cudaGetDevice) current.
  explicit ScopedContext(AnyContext) noexcept;
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

  /// cudaSuccess when a suitable context is current; otherwise no driver
  /// call may be made in this scope.
  cudaError_t status() const noexcept { return status_; }

 private:
  void enter(int device) noexcept;

  CUcontext saved_ = nullptr;
  bool switched_ = false;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace sova::cuda_detail
