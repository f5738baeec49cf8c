// The table pairs each driver result the allocator can meet with the runtime
// error of the same meaning. Most codes share their number with the runtime's
// (CUDA 10.1 aligned them), but the pairing is written out, not assumed, so a
// future renumbering cannot turn an out-of-memory into something else.
#include "driver/cuda/error_map.hpp"

namespace sova::cuda_detail {

namespace {

struct Pair {
  CUresult driver;
  cudaError_t runtime;
};

constexpr Pair kTable[] = {
    {CUDA_SUCCESS, cudaSuccess},
    // arguments and resources
    {CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue},
    {CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation},
    {CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle},
    {CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound},
    {CUDA_ERROR_NOT_READY, cudaErrorNotReady},
    {CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState},
    {CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted},
    {CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported},
    {CUDA_ERROR_ALREADY_MAPPED, cudaErrorAlreadyMapped},
    {CUDA_ERROR_NOT_MAPPED, cudaErrorNotMapped},
    {CUDA_ERROR_MAP_FAILED, cudaErrorMapBufferObjectFailed},
    {CUDA_ERROR_UNMAP_FAILED, cudaErrorUnmapBufferObjectFailed},
    {CUDA_ERROR_INVALID_ADDRESS_SPACE, cudaErrorInvalidAddressSpace},
    {CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem},
    {CUDA_ERROR_TIMEOUT, cudaErrorTimeout},
    // initialisation, driver and devices
    {CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError},
    {CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading},
    {CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice},
    {CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice},
    {CUDA_ERROR_DEVICE_NOT_LICENSED, cudaErrorDeviceNotLicensed},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, cudaErrorDevicesUnavailable},
    {CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, cudaErrorCallRequiresNewerDriver},
    {CUDA_ERROR_SYSTEM_NOT_READY, cudaErrorSystemNotReady},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch},
    {CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, cudaErrorCompatNotSupportedOnDevice},
    {CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, cudaErrorDeviceAlreadyInUse},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, cudaErrorSetOnActiveProcess},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cudaErrorPeerAccessUnsupported},
    {CUDA_ERROR_MPS_CONNECTION_FAILED, cudaErrorMpsConnectionFailed},
    {CUDA_ERROR_MPS_RPC_FAILURE, cudaErrorMpsRpcFailure},
    {CUDA_ERROR_MPS_SERVER_NOT_READY, cudaErrorMpsServerNotReady},
    {CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, cudaErrorMpsMaxClientsReached},
    {CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, cudaErrorMpsMaxConnectionsReached},
    {CUDA_ERROR_MPS_CLIENT_TERMINATED, cudaErrorMpsClientTerminated},
    // sticky errors from earlier work: the context is unusable
    {CUDA_ERROR_ECC_UNCORRECTABLE, cudaErrorECCUncorrectable},
    {CUDA_ERROR_NVLINK_UNCORRECTABLE, cudaErrorNvlinkUncorrectable},
    {CUDA_ERROR_CONTAINED, cudaErrorContained},
    {CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress},
    {CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure},
    {CUDA_ERROR_LAUNCH_TIMEOUT, cudaErrorLaunchTimeout},
    {CUDA_ERROR_ASSERT, cudaErrorAssert},
    {CUDA_ERROR_HARDWARE_STACK_ERROR, cudaErrorHardwareStackError},
    {CUDA_ERROR_ILLEGAL_INSTRUCTION, cudaErrorIllegalInstruction},
    {CUDA_ERROR_MISALIGNED_ADDRESS, cudaErrorMisalignedAddress},
    {CUDA_ERROR_INVALID_PC, cudaErrorInvalidPc},
    {CUDA_ERROR_EXTERNAL_DEVICE, cudaErrorExternalDevice},
    // stream capture (a VMM call on a capturing stream's context, a query on
    // a stream under global capture)
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cudaErrorStreamCaptureUnsupported},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, cudaErrorStreamCaptureInvalidated},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, cudaErrorStreamCaptureImplicit},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, cudaErrorStreamCaptureWrongThread},
    {CUDA_ERROR_CAPTURED_EVENT, cudaErrorCapturedEvent},
    {CUDA_ERROR_UNKNOWN, cudaErrorUnknown},
};

}  // namespace

cudaError_t to_runtime_error(CUresult result) noexcept {
  // Linear scan: called only on the slow path (a driver call just ran, tens
  // of microseconds), and success is the first entry.
  for (const Pair& p : kTable) {
    if (p.driver == result) return p.runtime;
  }
  return cudaErrorUnknown;
}

}  // namespace sova::cuda_detail
