// Resolution happens once, on the first driver call that needs libcuda (not at
// library load: a process that never touches the GPU pays nothing, and a
// static initialiser must not start the CUDA runtime).
#include "driver/cuda/entry_points.hpp"

#include "driver/cuda/error_map.hpp"
#include "driver/cuda/runtime_call.hpp"

#include <type_traits>

namespace sova::cuda_detail {

namespace {

// The ABI every PFN_* in EntryPoints matches. Asking for a fixed version (not
// the runtime's own) keeps the typedefs right when the toolkit is upgraded:
// a symbol whose signature changes in a later CUDA (cuCtxGetDevice did in
// 13.0) keeps resolving to the 12.0 variant we were compiled for.
constexpr unsigned int kAbiVersion = 12000;

template <class Fn>
cudaError_t resolve(const char* symbol, Fn* slot, unsigned int version = kAbiVersion) noexcept {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      quiet([&] { return cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found); });
  if (err != cudaSuccess) return err;  // no driver, or one older than kAbiVersion
  // Found-but-null means the installed driver lacks the symbol: it is older
  // than what we need, which the runtime calls an insufficient driver.
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorInsufficientDriver;
  *slot = reinterpret_cast<Fn>(fn);
  return cudaSuccess;
}

EntryPoints load() noexcept {
  EntryPoints t;
  cudaError_t err = cudaSuccess;
  // Stops at the first failure; every later resolve is skipped.
  auto get = [&](const char* symbol, auto* slot) {
    if (err == cudaSuccess) err = resolve(symbol, slot);
  };
  get("cuInit", &t.init);
  get("cuDeviceGet", &t.device_get);
  get("cuDeviceGetName", &t.device_get_name);
  get("cuDeviceTotalMem", &t.device_total_mem);
  get("cuDeviceGetAttribute", &t.device_get_attribute);
  get("cuDevicePrimaryCtxRetain", &t.device_primary_ctx_retain);
  get("cuDevicePrimaryCtxGetState", &t.device_primary_ctx_get_state);
  get("cuCtxGetCurrent", &t.ctx_get_current);
  get("cuCtxGetDevice", &t.ctx_get_device);
  get("cuStreamIsCapturing", &t.stream_is_capturing);
  get("cuStreamGetId", &t.stream_get_id);
  get("cuStreamGetCtx", &t.stream_get_ctx);
  get("cuThreadExchangeStreamCaptureMode", &t.thread_exchange_capture_mode);
  get("cuCtxSetCurrent", &t.ctx_set_current);
  get("cuMemGetAllocationGranularity", &t.mem_get_allocation_granularity);
  get("cuMemAddressReserve", &t.mem_address_reserve);
  get("cuMemAddressFree", &t.mem_address_free);
  get("cuMemCreate", &t.mem_create);
  get("cuMemRelease", &t.mem_release);
  get("cuMemMap", &t.mem_map);
  get("cuMemUnmap", &t.mem_unmap);
  get("cuMemSetAccess", &t.mem_set_access);
  get("cuMemRetainAllocationHandle", &t.mem_retain_allocation_handle);
  get("cuMemGetAllocationPropertiesFromHandle", &t.mem_get_allocation_properties_from_handle);
  get("cuMemExportToShareableHandle", &t.mem_export_to_shareable_handle);
  get("cuMemImportFromShareableHandle", &t.mem_import_from_shareable_handle);
  get("cuMemsetD8Async", &t.memset_d8_async);
  // The runtime has initialised the driver by now, but say so explicitly:
  // cuInit is what reports "driver present, no device".
  if (err == cudaSuccess) err = to_runtime_error(t.init(0));
  if (err == cudaSuccess) {
    int count = 0;
    err = quiet([&] { return cudaGetDeviceCount(&count); });
    if (err == cudaSuccess) t.device_count = count;
  }
  t.status = err;
  return t;
}

static_assert(std::is_trivially_destructible_v<EntryPoints>, "the table must stay valid during static destruction");

}  // namespace

const EntryPoints& entry_points() noexcept {
  static const EntryPoints table = load();
  return table;
}

}  // namespace sova::cuda_detail
