// Graph capture through the runtime: capture state, the thread's capture
// mode, graph-release callbacks (user objects) and the pool's own streams.
// Nothing here enqueues work on any stream.
#include "driver/cuda/context.hpp"
#include "driver/cuda/cuda_driver.hpp"
#include "driver/cuda/relaxed_capture.hpp"
#include "driver/cuda/runtime_call.hpp"

#include <atomic>
#include <new>

namespace sova::cuda_detail {

namespace {

/// A user object's destructor: calls the callback unless disarmed, then
/// frees itself (a user object is destroyed once).
struct Trampoline {
  GraphReleaseCallback callback;
  void* context;
  std::atomic<bool> armed;

  static void CUDART_CB run(void* self) {
    auto* t = static_cast<Trampoline*>(self);
    if (t->armed.load(std::memory_order_acquire)) t->callback(t->context);
    delete t;
  }
};

}  // namespace

cudaError_t CudaDriver::stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  // The first four parameters have the same meaning in CUDA 12 and 13 (13
  // added edge data after the dependencies, which we do not ask for).
  const cudaError_t err = quiet([&] { return cudaStreamGetCaptureInfo(stream, &status, &id, &graph); });
  if (err != cudaSuccess) return err;
  out->status = status;
  out->id = status == cudaStreamCaptureStatusNone ? 0 : id;
  out->graph = status == cudaStreamCaptureStatusActive ? graph : nullptr;
  return cudaSuccess;
}

cudaError_t CudaDriver::exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept {
  if (mode == nullptr) return cudaErrorInvalidValue;
  return quiet([&] { return cudaThreadExchangeStreamCaptureMode(mode); });
}

cudaError_t CudaDriver::graph_on_release(cudaGraph_t graph, GraphReleaseCallback callback, void* context) noexcept {
  if (graph == nullptr || callback == nullptr) return cudaErrorInvalidValue;
  // The user object's destructor is a trampoline that can be disarmed: if
  // the graph refuses the reference, dropping it must not call the callback.
  auto* trampoline = new (std::nothrow) Trampoline{callback, context, true};
  if (trampoline == nullptr) return cudaErrorMemoryAllocation;
  cudaUserObject_t object = nullptr;
  // One reference, moved to the graph: the object dies, and the callback
  // runs, when the graph, its executables and their launches are all gone.
  // cudaUserObjectNoDestructorSync is the only flag there is: the callback
  // is ordered with no CUDA work (it only queues memory for return).
  cudaError_t err = quiet(
      [&] { return cudaUserObjectCreate(&object, trampoline, &Trampoline::run, 1, cudaUserObjectNoDestructorSync); });
  if (err != cudaSuccess) {
    delete trampoline;
    return err;
  }
  err = quiet([&] { return cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove); });
  if (err != cudaSuccess) {
    trampoline->armed.store(false, std::memory_order_release);
    (void)quiet([&] { return cudaUserObjectRelease(object, 1); });  // runs (and frees) the disarmed trampoline
    return err;
  }
  return cudaSuccess;
}

cudaError_t CudaDriver::stream_create(int device, cudaStream_t* out) noexcept {
  if (out == nullptr) return cudaErrorInvalidValue;
  RelaxedCapture relaxed;     // made while another stream may capture
  ScopedContext ctx(device);  // the device's primary context: the stream is the device's
  if (ctx.status() != cudaSuccess) return ctx.status();
  return quiet([&] { return cudaStreamCreateWithFlags(out, cudaStreamNonBlocking); });
}

cudaError_t CudaDriver::stream_destroy(cudaStream_t stream) noexcept {
  return quiet([&] { return cudaStreamDestroy(stream); });
}

}  // namespace sova::cuda_detail
