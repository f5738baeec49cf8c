// Which stream queries a capturing stream allows: each query of a stream under
// a global-mode capture, with the calling thread in global and in relaxed
// mode, and whether the capture survives it. Decides how sova learns a
// stream's device and identity under capture (docs/multi-gpu.md, "Which device
// a stream is on"). Also: whether an event of one device can be recorded on a
// stream of another (the pool's fences, StreamRegistry::fence_refused).
// Not probed: a destroyed stream's handle. cuStreamIsCapturing on one (idle
// when destroyed, not made again yet) ended the process with SIGSEGV on the
// H200s (driver 580.159.04): sova never asks a handle outside a call that
// passes it.
//
//   build/tools/probe_capture_queries     # two GPUs or more for the last line
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>

__global__ void nothing() {}

namespace {

const char* name_of(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s != nullptr ? s : "?";
}

void probe(const char* what, const std::function<CUresult(CUstream)>& query) {
  for (bool relaxed : {false, true}) {
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
    nothing<<<1, 1, 0, s>>>();
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (relaxed) cuThreadExchangeStreamCaptureMode(&mode);
    const CUresult r = query(reinterpret_cast<CUstream>(s));
    if (relaxed) cuThreadExchangeStreamCaptureMode(&mode);
    nothing<<<1, 1, 0, s>>>();
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    std::printf("%-22s %-8s query %-36s end_capture %s\n", what, relaxed ? "relaxed" : "global", name_of(r),
                cudaGetErrorName(end));
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    cudaStreamDestroy(s);
  }
}

}  // namespace

int main() {
  cudaSetDevice(0);
  cudaFree(nullptr);
  probe("cuStreamIsCapturing", [](CUstream s) {
    CUstreamCaptureStatus st;
    return cuStreamIsCapturing(s, &st);
  });
  probe("cuStreamGetId", [](CUstream s) {
    unsigned long long id = 0;
    return cuStreamGetId(s, &id);
  });
  probe("cuStreamGetDevice", [](CUstream s) {
    CUdevice d = 0;
    return cuStreamGetDevice(s, &d);
  });
  probe("cuStreamGetCtx", [](CUstream s) {
    CUcontext c = nullptr;
    return cuStreamGetCtx(s, &c);
  });
  probe("cuStreamGetFlags", [](CUstream s) {
    unsigned int f = 0;
    return cuStreamGetFlags(s, &f);
  });
  probe("cuStreamGetPriority", [](CUstream s) {
    int p = 0;
    return cuStreamGetPriority(s, &p);
  });
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count >= 2) {
    cudaEvent_t event = nullptr;
    cudaEventCreateWithFlags(&event, cudaEventDisableTiming);  // device 0's
    cudaSetDevice(1);
    cudaStream_t s1 = nullptr;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    const cudaError_t rec = cudaEventRecord(event, s1);
    std::printf("event of device 0 recorded on a stream of device 1: %s\n", cudaGetErrorName(rec));
    cudaGetLastError();
    cudaStreamDestroy(s1);
    cudaSetDevice(0);
    // Handles across devices: destroy a stream of device 0, make one on device 1.
    int reused = 0;
    for (int i = 0; i < 20; ++i) {
      cudaStream_t a = nullptr, b = nullptr;
      cudaSetDevice(0);
      cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
      cudaStreamDestroy(a);
      cudaSetDevice(1);
      cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
      reused += a == b;
      cudaStreamDestroy(b);
    }
    std::printf("a destroyed stream's handle came back on another device %d times of 20\n", reused);
  }
  return 0;
}
