// Device queries. Attributes need only an initialised driver, not a context,
// so device_info does not create one (asking about a device must not cost it
// a context, hundreds of MiB, the program may never use) unless the driver
// refuses the granularity query without one.
// memory_info and device_synchronize act on a context and use the device's
// primary one, then give the caller's back.
#include "base/tls_model.hpp"
#include "driver/cuda/allocation_prop.hpp"
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/runtime_call.hpp"

namespace sova::cuda_detail {

namespace {

cudaError_t bool_attribute(CUdevice dev, CUdevice_attribute attr, bool* out) noexcept {
  int value = 0;
  const CUresult r = entry_points().device_get_attribute(&value, attr, dev);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *out = value != 0;
  return cudaSuccess;
}

cudaError_t granularity(int device, CUmemAllocationGranularity_flags which, std::size_t* out) noexcept {
  CUmemAllocationProp prop;
  if (const cudaError_t err = allocation_prop(device, &prop); err != cudaSuccess) return err;
  const EntryPoints& cu = entry_points();
  CUresult r = cu.mem_get_allocation_granularity(out, &prop, which);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    // The documentation does not say whether this query needs a context. If
    // the driver insists, ask again under the device's primary context.
    ScopedContext ctx(device);
    if (ctx.status() != cudaSuccess) return ctx.status();
    r = cu.mem_get_allocation_granularity(out, &prop, which);
  }
  return to_runtime_error(r);
}

}  // namespace

cudaError_t CudaDriver::device_count(int* count) noexcept {
  if (count == nullptr) return cudaErrorInvalidValue;
  const EntryPoints& cu = entry_points();
  *count = cu.status == cudaSuccess ? cu.device_count : 0;
  return cu.status;
}

cudaError_t CudaDriver::current_device(int* device) noexcept {
  if (device == nullptr) return cudaErrorInvalidValue;
  // On every sovaMallocAsync: cudaGetDevice costs 39 ns on the H100's host,
  // cuCtxGetCurrent 12 ns (docs/benchmarks.md, "Driver costs"). A context belongs to one device for
  // life, so each thread remembers the device of the context it saw last.
  // No current context yet (nothing initialised on this thread): ask the runtime.
  // Initial-exec: a load off the thread pointer, where the default model in a
  // shared library calls __tls_get_addr (~10 ns each) on every access.
  struct LastContext {
    CUcontext context = nullptr;
    int device = 0;
  };
  SOVA_TLS_INITIAL_EXEC static thread_local LastContext last;
  CUcontext& last_context = last.context;
  int& last_device = last.device;
  const EntryPoints& cu = entry_points();
  if (cu.status == cudaSuccess) {
    CUcontext context = nullptr;
    if (cu.ctx_get_current(&context) == CUDA_SUCCESS && context != nullptr) {
      if (context == last_context) {
        *device = last_device;
        return cudaSuccess;
      }
      CUdevice ordinal = 0;
      if (cu.ctx_get_device(&ordinal) == CUDA_SUCCESS) {
        last_context = context;
        last_device = static_cast<int>(ordinal);
        *device = last_device;
        return cudaSuccess;
      }
    }
  }
  return quiet([&] { return cudaGetDevice(device); });
}

cudaError_t CudaDriver::device_info(int device, DeviceInfo* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_device(device); err != cudaSuccess) return err;
  const EntryPoints& cu = entry_points();
  CUdevice dev = 0;
  if (CUresult r = cu.device_get(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);

  // Filled in a local and copied at the end: on failure *out is untouched.
  DeviceInfo info;
  info.ordinal = device;
  if (CUresult r = cu.device_get_name(info.name, static_cast<int>(sizeof info.name), dev); r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  info.name[sizeof info.name - 1] = '\0';
  if (CUresult r = cu.device_total_mem(&info.total_memory, dev); r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }

  const struct {
    CUdevice_attribute attr;
    bool* field;
  } flags[] = {
      {CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, &info.vmm_supported},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, &info.posix_fd_supported},
      {CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, &info.fabric_supported},
      {CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED, &info.compression_supported},
      {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, &info.rdma_with_vmm_supported},
  };
  for (const auto& f : flags) {
    if (const cudaError_t err = bool_attribute(dev, f.attr, f.field); err != cudaSuccess) return err;
  }
  // Attributes newer than some drivers sova runs on: a driver that does not
  // know one answers CUDA_ERROR_INVALID_VALUE, which means "not supported".
  (void)bool_attribute(dev, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, &info.multicast_supported);
  (void)bool_attribute(dev, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                       &info.host_numa_vmm_supported);
  if (int numa = -1; cu.device_get_attribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, dev) == CUDA_SUCCESS) {
    info.host_numa_id = numa;
  }

  // Without VMM there is no granularity to ask for; 0 says so (the pool
  // refuses such a device with cudaErrorNotSupported).
  if (info.vmm_supported) {
    if (const cudaError_t err = granularity(device, CU_MEM_ALLOC_GRANULARITY_MINIMUM, &info.granularity);
        err != cudaSuccess) {
      return err;
    }
    if (const cudaError_t err =
            granularity(device, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED, &info.recommended_granularity);
        err != cudaSuccess) {
      return err;
    }
  }
  *out = info;
  return cudaSuccess;
}

cudaError_t CudaDriver::memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  ScopedContext ctx(device);
  if (ctx.status() != cudaSuccess) return ctx.status();
  // The runtime acts on the thread's current driver context, now `device`'s.
  std::size_t free_now = 0;
  std::size_t total = 0;
  const cudaError_t err = quiet([&] { return cudaMemGetInfo(&free_now, &total); });
  if (err != cudaSuccess) return err;
  *free_bytes = free_now;
  *total_bytes = total;
  return cudaSuccess;
}

cudaError_t CudaDriver::device_synchronize(int device) noexcept {
  // A device whose primary context is not active has no work of this process
  // (sova's streams and events are all on primary contexts) and must not get
  // one: a context costs hundreds of MiB of the device's memory, and a process
  // of one GPU among several (torchrun) would take them on every GPU.
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) return cu.status;
  CUdevice dev = 0;
  if (const CUresult r = cu.device_get(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);
  unsigned int flags = 0;
  int active = 0;
  if (const CUresult r = cu.device_primary_ctx_get_state(dev, &flags, &active); r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  if (active == 0) return cudaSuccess;
  ScopedContext ctx(device);
  if (ctx.status() != cudaSuccess) return ctx.status();
  return quiet([] { return cudaDeviceSynchronize(); });
}

}  // namespace sova::cuda_detail
