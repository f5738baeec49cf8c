// The real CUDA driver's capture methods on a GPU (lib/driver/cuda/capture.cpp):
// capture info against the runtime's, the thread's capture mode, release
// callbacks through user objects, pool-owned streams, and VMM calls that
// never invalidate a global-mode capture. Suite 'gpu'.
#include "support/catch.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace sova;
using namespace std::chrono_literals;

namespace {

struct Released {
  std::atomic<int> calls{0};
  static void callback(void* self) { static_cast<Released*>(self)->calls.fetch_add(1); }
};

/// Polls for up to 10 s: CUDA runs user-object destructors on its own thread.
bool released_within(const Released& r, int expected) {
  for (int i = 0; i < 10000; ++i) {
    if (r.calls.load() == expected) return true;
    std::this_thread::sleep_for(1ms);
  }
  return r.calls.load() == expected;
}

}  // namespace

TEST_CASE("cuda driver: stream_capture_info agrees with the runtime", "[gpu][cuda_driver][capture]") {
  Driver& d = cuda_driver();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(d.stream_capture_info(s, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusNone);
  CHECK(info.id == 0);
  CHECK(info.graph == nullptr);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(d.stream_capture_info(s, &info) == cudaSuccess);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamGetCaptureInfo(s, &status, &id, &graph) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusActive);
  CHECK(info.id == id);
  CHECK(info.graph == graph);
  cudaGraph_t ended = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &ended) == cudaSuccess);
  CHECK(ended == graph);
  REQUIRE(cudaGraphDestroy(ended) == cudaSuccess);
  CHECK(d.stream_capture_info(s, nullptr) == cudaErrorInvalidValue);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("cuda driver: exchange_capture_mode is the thread's", "[gpu][cuda_driver][capture]") {
  Driver& d = cuda_driver();
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(d.exchange_capture_mode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);
  cudaStreamCaptureMode other_thread = cudaStreamCaptureModeRelaxed;
  std::thread([&] {
    cudaStreamCaptureMode m = cudaStreamCaptureModeThreadLocal;
    d.exchange_capture_mode(&m);
    other_thread = m;  // a new thread starts in global mode
    d.exchange_capture_mode(&m);
  }).join();
  CHECK(other_thread == cudaStreamCaptureModeGlobal);
  REQUIRE(d.exchange_capture_mode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeRelaxed);
}

TEST_CASE("cuda driver: graph_on_release fires once the graph, its executables and launches are gone",
          "[gpu][cuda_driver][capture]") {
  Driver& d = cuda_driver();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* scratch = nullptr;
  REQUIRE(cudaMalloc(&scratch, 1 << 20) == cudaSuccess);
  Released released;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(d.stream_capture_info(s, &info) == cudaSuccess);
  REQUIRE(d.graph_on_release(info.graph, &Released::callback, &released) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(scratch, 1, 1 << 20, s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  for (int i = 0; i < 10; ++i) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  std::this_thread::sleep_for(50ms);
  CHECK(released.calls.load() == 0);  // the executable is alive
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(released_within(released, 1));
  REQUIRE(cudaFree(scratch) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("cuda driver: VMM calls and pool streams during a global capture leave it valid",
          "[gpu][cuda_driver][capture]") {
  Driver& d = cuda_driver();
  DeviceInfo info;
  REQUIRE(d.device_info(0, &info) == cudaSuccess);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  // From this thread and from another, both in global mode.
  auto vmm_round = [&]() -> cudaStream_t {
    std::uintptr_t va = 0;
    PhysicalHandle h = 0;
    REQUIRE(d.address_reserve(info.granularity, info.granularity, &va) == cudaSuccess);
    REQUIRE(d.physical_create(0, info.granularity, &h) == cudaSuccess);
    REQUIRE(d.map(va, info.granularity, h) == cudaSuccess);
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = 0;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    REQUIRE(d.set_access(va, info.granularity, &desc, 1) == cudaSuccess);
    REQUIRE(d.unmap(va, info.granularity) == cudaSuccess);
    REQUIRE(d.physical_release(h) == cudaSuccess);
    REQUIRE(d.address_free(va, info.granularity) == cudaSuccess);
    EventHandle e = nullptr;
    REQUIRE(d.event_create_on(0, &e) == cudaSuccess);
    REQUIRE(d.event_destroy(e) == cudaSuccess);
    cudaStream_t own = nullptr;
    REQUIRE(d.stream_create(0, &own) == cudaSuccess);
    return own;  // destroyed after the capture
  };
  cudaStream_t own[2] = {vmm_round(), nullptr};
  std::thread([&] { own[1] = vmm_round(); }).join();
  CaptureInfo capture;
  REQUIRE(d.stream_capture_info(s, &capture) == cudaSuccess);
  CHECK(capture.status == cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  for (cudaStream_t stream : own) CHECK(d.stream_destroy(stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}
