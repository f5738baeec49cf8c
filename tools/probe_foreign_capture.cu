// What a synchronize made by one thread does to a capture running on another:
// thread A captures plain kernels on its own stream in global mode (a
// library's capture sova knows nothing of) while thread B, in global or in
// relaxed mode, waits for the device, for a stream, or for an event. Prints
// each call's result and whether A's capture survived. Decides how a pool may
// wait for frees without invalidating captures it does not know
// (StreamRegistry::synchronize_devices).
//
//   build/tools/probe_foreign_capture
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <thread>

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

namespace {

void probe(const char* what, bool relaxed, const std::function<cudaError_t(cudaStream_t, cudaEvent_t)>& wait) {
  cudaStream_t captured = nullptr, eager = nullptr;
  cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&eager, cudaStreamNonBlocking);
  cudaEvent_t event = nullptr;
  cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  spin<<<1, 1, 0, eager>>>(100000);  // eager work for B to wait for
  cudaEventRecord(event, eager);
  std::promise<void> begun, waited;
  cudaError_t end = cudaSuccess;
  std::thread a([&] {
    cudaSetDevice(0);
    cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal);
    spin<<<1, 1, 0, captured>>>(1000);
    begun.set_value();
    waited.get_future().wait();
    spin<<<1, 1, 0, captured>>>(1000);
    cudaGraph_t graph = nullptr;
    end = cudaStreamEndCapture(captured, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
  });
  begun.get_future().wait();
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (relaxed) cuThreadExchangeStreamCaptureMode(&mode);
  const cudaError_t r = wait(eager, event);
  if (relaxed) cuThreadExchangeStreamCaptureMode(&mode);
  waited.set_value();
  a.join();
  std::printf("%-34s %-8s wait %-36s other thread's capture: %s\n", what, relaxed ? "relaxed" : "global",
              cudaGetErrorName(r), cudaGetErrorName(end));
  cudaGetLastError();
  cudaDeviceSynchronize();
  cudaEventDestroy(event);
  cudaStreamDestroy(eager);
  cudaStreamDestroy(captured);
}

}  // namespace

int main() {
  cudaSetDevice(0);
  cudaFree(nullptr);
  probe("nothing", false, [](cudaStream_t, cudaEvent_t) { return cudaSuccess; });
  for (bool relaxed : {false, true}) {
    probe("cudaDeviceSynchronize", relaxed, [](cudaStream_t, cudaEvent_t) { return cudaDeviceSynchronize(); });
    probe("cuCtxSynchronize", relaxed, [](cudaStream_t, cudaEvent_t) {
      return cuCtxSynchronize() == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
    });
    probe("cudaStreamSynchronize(other)", relaxed,
          [](cudaStream_t eager, cudaEvent_t) { return cudaStreamSynchronize(eager); });
    probe("cudaStreamQuery(other)", relaxed, [](cudaStream_t eager, cudaEvent_t) { return cudaStreamQuery(eager); });
    probe("cudaEventSynchronize", relaxed, [](cudaStream_t, cudaEvent_t e) { return cudaEventSynchronize(e); });
    probe("cudaEventRecord(other)+Synchronize", relaxed, [](cudaStream_t eager, cudaEvent_t e) {
      const cudaError_t r = cudaEventRecord(e, eager);
      return r != cudaSuccess ? r : cudaEventSynchronize(e);
    });
    probe("cudaStreamSynchronize(legacy)", relaxed,
          [](cudaStream_t, cudaEvent_t) { return cudaStreamSynchronize(cudaStreamLegacy); });
    probe("cudaStreamIsCapturing(legacy)", relaxed, [](cudaStream_t, cudaEvent_t) {
      cudaStreamCaptureStatus s;
      return cudaStreamIsCapturing(cudaStreamLegacy, &s);
    });
    probe("cuMemUnmap-like: cudaMalloc+cudaFree", relaxed, [](cudaStream_t, cudaEvent_t) {
      void* p = nullptr;
      const cudaError_t r = cudaMalloc(&p, 1 << 20);
      return r != cudaSuccess ? r : cudaFree(p);
    });
  }
  return 0;
}
