// Physical memory with properties (host NUMA, compression, shareable handle
// types), the property query of a mapped address, and POSIX file descriptor
// export/import: thin wrappers over cuMem*, as vmm.cpp. A failed driver call
// changed nothing, so none needs a rollback.
#include "driver/cuda/allocation_prop.hpp"
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/relaxed_capture.hpp"

#include <cstdint>
#include <optional>

namespace sova::cuda_detail {

namespace {
/// A device location needs that device's context; a host node any context.
void enter(const PhysicalProps& props, std::optional<ScopedContext>& ctx) noexcept {
  if (props.location.type == cudaMemLocationTypeDevice) {
    ctx.emplace(props.location.id);
  } else {
    ctx.emplace(AnyContext{});
  }
}
}  // namespace

cudaError_t CudaDriver::physical_create_with(const PhysicalProps& props, std::size_t bytes,
                                             PhysicalHandle* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;  // relaxed_capture.hpp
  std::optional<ScopedContext> ctx;
  enter(props, ctx);
  if (ctx->status() != cudaSuccess) return ctx->status();
  CUmemAllocationProp prop;
  if (const cudaError_t err = allocation_prop(props, &prop); err != cudaSuccess) return err;
  CUmemGenericAllocationHandle handle = 0;
  const CUresult r = entry_points().mem_create(&handle, bytes, &prop, 0);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *out = static_cast<PhysicalHandle>(handle);
  return cudaSuccess;
}

cudaError_t CudaDriver::granularity_for(const PhysicalProps& props, std::size_t* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  std::optional<ScopedContext> ctx;
  enter(props, ctx);
  if (ctx->status() != cudaSuccess) return ctx->status();
  CUmemAllocationProp prop;
  if (const cudaError_t err = allocation_prop(props, &prop); err != cudaSuccess) return err;
  return to_runtime_error(entry_points().mem_get_allocation_granularity(out, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

cudaError_t CudaDriver::properties_at(std::uintptr_t va, PhysicalProps* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  const EntryPoints& cu = entry_points();
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = cu.mem_retain_allocation_handle(&handle, reinterpret_cast<void*>(va)); r != CUDA_SUCCESS)
    return to_runtime_error(r);
  CUmemAllocationProp prop = {};
  const CUresult r = cu.mem_get_allocation_properties_from_handle(&prop, handle);
  cu.mem_release(handle);  // the retain's reference only
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *out = physical_props_of(prop);
  return cudaSuccess;
}

cudaError_t CudaDriver::export_posix_fd(PhysicalHandle handle, int* fd) noexcept {
  if (fd == nullptr) return cudaErrorInvalidValue;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  int out = -1;
  const CUresult r = entry_points().mem_export_to_shareable_handle(
      &out, static_cast<CUmemGenericAllocationHandle>(handle), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *fd = out;
  return cudaSuccess;
}

cudaError_t CudaDriver::import_posix_fd(int fd, PhysicalHandle* out) noexcept {
  if (out == nullptr || fd < 0) return cudaErrorInvalidValue;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  CUmemGenericAllocationHandle handle = 0;
  const CUresult r = entry_points().mem_import_from_shareable_handle(
      &handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *out = static_cast<PhysicalHandle>(handle);
  return cudaSuccess;
}

}  // namespace sova::cuda_detail
