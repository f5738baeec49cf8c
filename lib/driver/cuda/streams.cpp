// Streams and events through the runtime: the pool holds runtime handles
// (cudaStream_t, and events it made here), and the runtime already resolves
// the special handles (0 / cudaStreamLegacy, cudaStreamPerThread) against the
// calling thread's current device, exactly as cudaMallocAsync does. No context
// switching here for the same reason: the caller's current device is part of
// what stream 0 means.
//
// event_create makes an event on the calling thread's current device;
// event_create_on on a named one. An event can be recorded only on a stream of
// its own device (cudaErrorInvalidResourceHandle otherwise), so the pool
// creates its fence events with event_create_on(its device).
#include "base/implicit_stream.hpp"
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/relaxed_capture.hpp"
#include "driver/cuda/runtime_call.hpp"

namespace sova::cuda_detail {

namespace {

cudaEvent_t as_event(EventHandle event) noexcept { return static_cast<cudaEvent_t>(event); }

}  // namespace

cudaError_t CudaDriver::event_create(EventHandle* event) noexcept {
  if (event == nullptr) return cudaErrorInvalidValue;
  cudaEvent_t created = nullptr;
  // Timing off: recording and querying are cheaper, and we never time.
  // Relaxed capture mode: a pool may make an event while a stream captures
  // (relaxed_capture.hpp).
  RelaxedCapture relaxed;
  const cudaError_t err = quiet([&] { return cudaEventCreateWithFlags(&created, cudaEventDisableTiming); });
  if (err != cudaSuccess) return err;
  *event = created;
  return cudaSuccess;
}

cudaError_t CudaDriver::event_create_on(int device, EventHandle* event) noexcept {
  if (event == nullptr) return cudaErrorInvalidValue;
  // The thread has a context and it is the device's: exactly event_create,
  // with no context switch (one GPU, or a thread already on the pool's device).
  const EntryPoints& cu = entry_points();
  CUcontext context = nullptr;
  int current = -1;
  if (cu.status == cudaSuccess && cu.ctx_get_current(&context) == CUDA_SUCCESS && context != nullptr &&
      current_device(&current) == cudaSuccess && current == device) {
    return event_create(event);
  }
  // Another device, or no context yet (a thread that never touched CUDA: the
  // runtime would make device 0's primary context current for it and leave it
  // so, which the pool must not do to its callers): make the device's primary
  // context current for the call (also refuses a bad ordinal), and give the
  // caller's back afterwards.
  ScopedContext ctx(device);
  if (ctx.status() != cudaSuccess) return ctx.status();
  return event_create(event);
}

cudaError_t CudaDriver::event_destroy(EventHandle event) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaEventDestroy(as_event(event)); });
}

cudaError_t CudaDriver::event_record(EventHandle event, cudaStream_t stream) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaEventRecord(as_event(event), stream); });
}

cudaError_t CudaDriver::event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept {
  if (!detail::is_implicit_stream(stream)) return event_record(event, stream);
  // The implicit handles name the current context's streams: `device`'s
  // primary context current for the call, the caller's given back (as
  // event_create_on does).
  ScopedContext ctx(device);
  if (ctx.status() != cudaSuccess) return ctx.status();
  return event_record(event, stream);
}

cudaError_t CudaDriver::event_query(EventHandle event) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaEventQuery(as_event(event)); });
}

cudaError_t CudaDriver::event_synchronize(EventHandle event) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaEventSynchronize(as_event(event)); });
}

cudaError_t CudaDriver::stream_wait_event(cudaStream_t stream, EventHandle event) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaStreamWaitEvent(stream, as_event(event), 0); });
}

cudaError_t CudaDriver::stream_query(cudaStream_t stream) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaStreamQuery(stream); });
}

cudaError_t CudaDriver::stream_synchronize(cudaStream_t stream) noexcept {
  RelaxedCapture relaxed;  // never invalidates another stream's capture (relaxed_capture.hpp)
  return quiet([&] { return cudaStreamSynchronize(stream); });
}

cudaError_t CudaDriver::stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept {
  if (capturing == nullptr) return cudaErrorInvalidValue;
  // On every allocation and free (the pool's graph-capture check): the driver
  // entry point costs 18 ns on the H100's host, cudaStreamIsCapturing 60 ns
  // (docs/benchmarks.md, "Driver costs"). Driver calls leave the runtime's last error alone.
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) return cu.status;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = cu.stream_is_capturing(reinterpret_cast<CUstream>(stream), &status);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    // The special handles (0, cudaStreamLegacy, cudaStreamPerThread) name a
    // stream of the *current* context; a thread that never touched CUDA has
    // none, and the driver refuses where the runtime would bind the current
    // device's primary context and answer. Let the runtime do exactly that
    // (once per such thread: afterwards the fast path above succeeds).
    cudaStreamCaptureStatus rt_status = cudaStreamCaptureStatusNone;
    const cudaError_t err = quiet([&] { return cudaStreamIsCapturing(stream, &rt_status); });
    if (err != cudaSuccess) return err;
    *capturing = rt_status != cudaStreamCaptureStatusNone;
    return cudaSuccess;
  }
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  // An invalidated capture is still a capture until cudaStreamEndCapture:
  // work submitted to the stream is not executed, so treat it as capturing.
  *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  return cudaSuccess;
}

cudaError_t CudaDriver::stream_id(cudaStream_t stream, unsigned long long* id) noexcept {
  if (id == nullptr) return cudaErrorInvalidValue;
  // On every allocation (the pool's check for reused handles): the driver
  // entry point costs 17 ns on the H100's host (docs/benchmarks.md, "Driver
  // costs"). A per-process unique id, never reused even when a handle value is.
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) return cu.status;
  unsigned long long value = 0;
  const CUresult r = cu.stream_get_id(reinterpret_cast<CUstream>(stream), &value);
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    // As in stream_is_capturing: the special handles need a current context;
    // the runtime binds the current device's and answers.
    const cudaError_t err = quiet([&] { return cudaStreamGetId(stream, &value); });
    if (err != cudaSuccess) return err;
  } else if (r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  *id = value;
  return cudaSuccess;
}

cudaError_t CudaDriver::stream_device(cudaStream_t stream, int* device) noexcept {
  if (device == nullptr) return cudaErrorInvalidValue;
  // The special handles name a stream of the current device's context.
  if (detail::is_implicit_stream(stream)) return current_device(device);
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) return cu.status;
  // Through the stream's context, not cuStreamGetDevice: that one refuses a
  // capturing stream and invalidates its capture, and sova asks while
  // capturing (a stream's first use under capture, a reused handle).
  // cuStreamGetCtx and the context switch below are allowed then (driver
  // 580, H200). Not on any fast path: three calls.
  CUcontext context = nullptr;
  if (const CUresult r = cu.stream_get_ctx(reinterpret_cast<CUstream>(stream), &context); r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  CUcontext saved = nullptr;
  if (const CUresult r = cu.ctx_get_current(&saved); r != CUDA_SUCCESS) return to_runtime_error(r);
  if (const CUresult r = cu.ctx_set_current(context); r != CUDA_SUCCESS) return to_runtime_error(r);
  CUdevice value = 0;
  const CUresult r = cu.ctx_get_device(&value);
  (void)cu.ctx_set_current(saved);
  if (r != CUDA_SUCCESS) return to_runtime_error(r);
  *device = static_cast<int>(value);  // an ordinal (cuDeviceGet's inverse on every driver so far)
  return cudaSuccess;
}

}  // namespace sova::cuda_detail
