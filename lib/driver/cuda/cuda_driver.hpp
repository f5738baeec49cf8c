// sova — CudaDriver: sova::Driver over the real CUDA driver and runtime.
//
// VMM and device queries go to libcuda through entry points resolved at run
// time (entry_points.hpp), under a scoped current context (context.hpp);
// streams and events go through the runtime, whose handles the pool already
// holds. Every runtime call leaves the caller's last-error state as it was
// (runtime_call.hpp). The object has no state of its own; all of it is
// process-wide and never destroyed, so any number of CudaDriver objects
// behave as one (cuda_driver() hands out a single one).
//
// Split by concern: cuda_driver.cpp (identity, cuda_driver()), devices.cpp,
// vmm.cpp, streams.cpp, capture.cpp, copies.cpp, host_register.cpp.
#pragma once

#include <sova/driver.hpp>

namespace sova::cuda_detail {

class CudaDriver final : public Driver {
 public:
  const char* name() const noexcept override { return "cuda"; }

  // devices.cpp
  cudaError_t device_count(int* count) noexcept override;
  cudaError_t current_device(int* device) noexcept override;
  cudaError_t device_info(int device, DeviceInfo* out) noexcept override;
  cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept override;
  cudaError_t device_synchronize(int device) noexcept override;

  // vmm.cpp
  cudaError_t address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept override;
  cudaError_t address_free(std::uintptr_t va, std::size_t bytes) noexcept override;
  cudaError_t physical_create(int device, std::size_t bytes, PhysicalHandle* out) noexcept override;
  cudaError_t physical_release(PhysicalHandle handle) noexcept override;
  cudaError_t map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) noexcept override;
  cudaError_t unmap(std::uintptr_t va, std::size_t bytes) noexcept override;
  cudaError_t set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                         std::size_t count) noexcept override;

  // vmm_props.cpp
  cudaError_t physical_create_with(const PhysicalProps& props, std::size_t bytes,
                                   PhysicalHandle* out) noexcept override;
  cudaError_t granularity_for(const PhysicalProps& props, std::size_t* out) noexcept override;
  cudaError_t properties_at(std::uintptr_t va, PhysicalProps* out) noexcept override;
  cudaError_t export_posix_fd(PhysicalHandle handle, int* fd) noexcept override;
  cudaError_t import_posix_fd(int fd, PhysicalHandle* out) noexcept override;

  // streams.cpp
  cudaError_t event_create(EventHandle* event) noexcept override;
  cudaError_t event_create_on(int device, EventHandle* event) noexcept override;
  cudaError_t event_destroy(EventHandle event) noexcept override;
  cudaError_t event_record(EventHandle event, cudaStream_t stream) noexcept override;
  cudaError_t event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept override;
  cudaError_t event_query(EventHandle event) noexcept override;
  cudaError_t event_synchronize(EventHandle event) noexcept override;
  cudaError_t stream_wait_event(cudaStream_t stream, EventHandle event) noexcept override;
  cudaError_t stream_query(cudaStream_t stream) noexcept override;
  cudaError_t stream_synchronize(cudaStream_t stream) noexcept override;
  cudaError_t stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept override;
  cudaError_t stream_id(cudaStream_t stream, unsigned long long* id) noexcept override;
  cudaError_t stream_device(cudaStream_t stream, int* device) noexcept override;

  // capture.cpp
  cudaError_t stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept override;
  cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept override;
  cudaError_t graph_on_release(cudaGraph_t graph, GraphReleaseCallback callback, void* context) noexcept override;
  cudaError_t stream_create(int device, cudaStream_t* out) noexcept override;
  cudaError_t stream_destroy(cudaStream_t stream) noexcept override;

  // copies.cpp
  cudaError_t host_alloc(std::size_t bytes, void** out) noexcept override;
  cudaError_t host_alloc_on(int device, std::size_t bytes, void** out) noexcept override;
  cudaError_t host_free(void* ptr) noexcept override;
  // host_register.cpp
  cudaError_t host_map(std::size_t bytes, void** out) noexcept override;
  cudaError_t host_unmap(void* ptr, std::size_t bytes) noexcept override;
  cudaError_t host_register_on(int device, void* ptr, std::size_t bytes) noexcept override;
  cudaError_t host_unregister(void* ptr) noexcept override;
  // copies.cpp
  cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept override;
  cudaError_t memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream) noexcept override;
};

}  // namespace sova::cuda_detail
