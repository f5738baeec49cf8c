// sova — the CUDA driver API entry points the real driver uses, resolved at
// run time through the runtime (cudaGetDriverEntryPointByVersion), so that
// libsova links without libcuda and loads on machines with no driver at all.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

/// Function pointers into libcuda, all for the ABI of CUDA 12.0 (the PFN_*
/// version suffixes below are the ABI each symbol had at 12.0). Members are
/// named without the `cu` prefix because cuda.h #defines some `cu*` names to
/// their versioned symbols.
struct EntryPoints {
  /// cudaSuccess when the driver loaded, every entry point resolved and
  /// cuInit succeeded; otherwise the runtime's error (cudaErrorInsufficientDriver
  /// with no driver, cudaErrorNoDevice with a driver but no device, ...), and
  /// no pointer may be called. Fixed for the life of the process, like the
  /// runtime's own initialisation result.
  cudaError_t status = cudaErrorInitializationError;
  /// Devices visible to the process (cudaGetDeviceCount); 0 unless status is cudaSuccess.
  int device_count = 0;

  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetName_v2000 device_get_name = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 device_primary_ctx_retain = nullptr;
  PFN_cuDevicePrimaryCtxGetState_v7000 device_primary_ctx_get_state = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxGetDevice_v2000 ctx_get_device = nullptr;
  PFN_cuStreamIsCapturing_v10000 stream_is_capturing = nullptr;
  PFN_cuStreamGetId_v12000 stream_get_id = nullptr;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 thread_exchange_capture_mode = nullptr;
  /// A stream's context: the one stream query besides cuStreamIsCapturing
  /// that a capturing stream allows (cuStreamGetDevice, cuStreamGetId and
  /// cuStreamGetFlags refuse it and invalidate the capture, in relaxed mode
  /// too: tools/probe_capture_queries on the H200s).
  PFN_cuStreamGetCtx_v9020 stream_get_ctx = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  // Sharing and property queries (docs/vmm.md): present in every 12.0 driver.
  PFN_cuMemRetainAllocationHandle_v11000 mem_retain_allocation_handle = nullptr;
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 mem_get_allocation_properties_from_handle = nullptr;
  PFN_cuMemExportToShareableHandle_v10020 mem_export_to_shareable_handle = nullptr;
  PFN_cuMemImportFromShareableHandle_v10020 mem_import_from_shareable_handle = nullptr;
  /// A wake's zeroing after SleepMode::discard_zeroed (memset_async).
  PFN_cuMemsetD8Async_v3020 memset_d8_async = nullptr;
};

/// The process's table, resolved on first call (thread-safe) and never
/// destroyed. Never fails: check `status`.
const EntryPoints& entry_points() noexcept;

}  // namespace sova::cuda_detail
