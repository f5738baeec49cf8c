// VA reservations, physical chunks, mappings and access: thin wrappers over
// cuMem*. Each runs under a current context (context.hpp): the target
// device's primary context for creates, and for calls that name only a VA
// range or a handle (which the driver resolves process-wide) whatever context
// the thread already has; and with the thread in relaxed capture mode
// (relaxed_capture.hpp: they never invalidate a capture). The driver
// guarantees that a failed call changed nothing, which is the Driver
// contract, so no rollback is needed here.
#include "driver/cuda/access_desc.hpp"
#include "driver/cuda/allocation_prop.hpp"
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/relaxed_capture.hpp"

#include <memory>
#include <new>
#include <type_traits>

namespace sova::cuda_detail {

static_assert(sizeof(PhysicalHandle) == sizeof(CUmemGenericAllocationHandle));
static_assert(sizeof(std::uintptr_t) == sizeof(CUdeviceptr));

cudaError_t CudaDriver::address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept {
  if (va == nullptr) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  CUdeviceptr ptr = 0;
  const CUresult r = entry_points().mem_address_reserve(&ptr, bytes, alignment, 0, 0);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *va = static_cast<std::uintptr_t>(ptr);
  return cudaSuccess;
}

cudaError_t CudaDriver::address_free(std::uintptr_t va, std::size_t bytes) noexcept {
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  return to_runtime_error(entry_points().mem_address_free(static_cast<CUdeviceptr>(va), bytes));
}

cudaError_t CudaDriver::physical_create(int device, std::size_t bytes, PhysicalHandle* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;
  ScopedContext ctx(device);  // also rejects a bad ordinal: cudaErrorInvalidDevice
  if (ctx.status() != cudaSuccess) return ctx.status();
  CUmemAllocationProp prop;
  if (const cudaError_t err = allocation_prop(device, &prop); err != cudaSuccess) return err;
  CUmemGenericAllocationHandle handle = 0;
  // Too little free memory: CUDA_ERROR_OUT_OF_MEMORY -> cudaErrorMemoryAllocation.
  const CUresult r = entry_points().mem_create(&handle, bytes, &prop, 0);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *out = static_cast<PhysicalHandle>(handle);
  return cudaSuccess;
}

cudaError_t CudaDriver::physical_release(PhysicalHandle handle) noexcept {
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  return to_runtime_error(entry_points().mem_release(static_cast<CUmemGenericAllocationHandle>(handle)));
}

cudaError_t CudaDriver::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) noexcept {
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  return to_runtime_error(entry_points().mem_map(static_cast<CUdeviceptr>(va), bytes, 0,
                                                 static_cast<CUmemGenericAllocationHandle>(handle), 0));
}

cudaError_t CudaDriver::unmap(std::uintptr_t va, std::size_t bytes) noexcept {
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  return to_runtime_error(entry_points().mem_unmap(static_cast<CUdeviceptr>(va), bytes));
}

cudaError_t CudaDriver::set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                                   std::size_t count) noexcept {
  if (descs == nullptr || count == 0) return cudaErrorInvalidValue;
  // All descriptors go to the driver in one call, so a failure leaves every
  // device's access as it was. A pool names a few devices at most: the stack
  // covers that, the heap anything larger.
  constexpr std::size_t kOnStack = 16;
  CUmemAccessDesc on_stack[kOnStack];
  std::unique_ptr<CUmemAccessDesc[]> on_heap;
  CUmemAccessDesc* translated = on_stack;
  if (count > kOnStack) {
    on_heap.reset(new (std::nothrow) CUmemAccessDesc[count]);
    if (!on_heap) return cudaErrorMemoryAllocation;
    translated = on_heap.get();
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (const cudaError_t err = to_driver_access(descs[i], &translated[i]); err != cudaSuccess) {
      return err;
    }
  }
  RelaxedCapture relaxed;
  ScopedContext ctx{AnyContext{}};
  if (ctx.status() != cudaSuccess) return ctx.status();
  return to_runtime_error(entry_points().mem_set_access(static_cast<CUdeviceptr>(va), bytes, translated, count));
}

}  // namespace sova::cuda_detail
