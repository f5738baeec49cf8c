// The Driver methods a driver need not implement: plain device memory through
// physical_create, and cudaErrorNotSupported for the rest (a Driver written
// before properties and sharing existed keeps serving plain pools).
#include "base/implicit_stream.hpp"

#include <sova/driver.hpp>

namespace sova {

namespace {
bool plain(const PhysicalProps& props) noexcept {
  return props.location.type == cudaMemLocationTypeDevice && props.handle_types == 0 && !props.compressible;
}
}  // namespace

cudaError_t Driver::physical_create_with(const PhysicalProps& props, std::size_t bytes, PhysicalHandle* out) noexcept {
  if (!plain(props)) return cudaErrorNotSupported;
  return physical_create(props.location.id, bytes, out);
}

cudaError_t Driver::granularity_for(const PhysicalProps& props, std::size_t* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (!plain(props)) return cudaErrorNotSupported;
  DeviceInfo info;
  if (const cudaError_t err = device_info(props.location.id, &info); err != cudaSuccess) return err;
  *out = info.granularity;
  return cudaSuccess;
}

cudaError_t Driver::event_create_on(int device, EventHandle* event) noexcept {
  int current = -1;
  if (const cudaError_t err = current_device(&current); err != cudaSuccess) return err;
  if (device != current) return cudaErrorInvalidDevice;
  return event_create(event);
}

cudaError_t Driver::event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept {
  if (detail::is_implicit_stream(stream)) {
    int current = -1;
    if (const cudaError_t err = current_device(&current); err != cudaSuccess) return err;
    if (device != current) return cudaErrorInvalidDevice;
  }
  return event_record(event, stream);
}

cudaError_t Driver::properties_at(std::uintptr_t, PhysicalProps*) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::export_posix_fd(PhysicalHandle, int*) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::import_posix_fd(int, PhysicalHandle*) noexcept { return cudaErrorNotSupported; }

cudaError_t Driver::stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  bool capturing = false;
  if (const cudaError_t err = stream_is_capturing(stream, &capturing); err != cudaSuccess) return err;
  *out = CaptureInfo{};
  if (capturing) out->status = cudaStreamCaptureStatusActive;  // no id, no graph: graphs cannot be served
  return cudaSuccess;
}

cudaError_t Driver::exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept {
  if (mode == nullptr) return cudaErrorInvalidValue;
  *mode = cudaStreamCaptureModeGlobal;  // a driver without modes: every thread is global
  return cudaSuccess;
}

cudaError_t Driver::graph_on_release(cudaGraph_t, GraphReleaseCallback, void*) noexcept {
  return cudaErrorNotSupported;
}
cudaError_t Driver::stream_create(int, cudaStream_t*) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::stream_destroy(cudaStream_t) noexcept { return cudaErrorNotSupported; }

}  // namespace sova

namespace sova {

cudaError_t Driver::host_alloc(std::size_t, void**) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::host_alloc_on(int, std::size_t bytes, void** out) noexcept { return host_alloc(bytes, out); }
cudaError_t Driver::host_free(void*) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::host_map(std::size_t, void**) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::host_unmap(void*, std::size_t) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::host_register_on(int, void*, std::size_t) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::host_unregister(void*) noexcept { return cudaErrorNotSupported; }
cudaError_t Driver::memcpy_async(void*, const void*, std::size_t, cudaStream_t) noexcept {
  return cudaErrorNotSupported;
}
cudaError_t Driver::memset_async(void*, int, std::size_t, cudaStream_t) noexcept { return cudaErrorNotSupported; }

}  // namespace sova
