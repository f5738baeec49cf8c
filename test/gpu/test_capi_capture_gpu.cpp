// The C API under graph capture on the GPU in the field's shape: every GPU of
// the machine visible, each made current in turn (cudaSetDevice), a stream of
// that device captured in each mode through sovaMallocAsync / sovaFreeAsync,
// the graph launched many times. On the H200s with two GPUs visible the first
// sovaMallocAsync under capture used to return cudaErrorStreamCaptureUnsupported
// and break the capture (cuStreamGetDevice refuses a capturing stream). Also:
// a capture of plain kernels on another stream beside sova's eager work.
// Suite 'gpu'.
#include "support/catch.hpp"
#include "support/tag_kernels.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

using namespace sova::test;

namespace {

struct CurrentDevice {  // puts the caller's device back
  int saved = 0;
  CurrentDevice() { REQUIRE(cudaGetDevice(&saved) == cudaSuccess); }
  ~CurrentDevice() { cudaSetDevice(saved); }
};

unsigned long long read_counter(const unsigned long long* counter) {
  unsigned long long value = ~0ull;
  REQUIRE(cudaMemcpy(&value, counter, sizeof value, cudaMemcpyDeviceToHost) == cudaSuccess);
  return value;
}

/// Sizes of the captured quadruples: small, odd and granule-crossing.
const std::vector<std::size_t> kSizes = {256, 4096, 777, std::size_t{4} << 20, (std::size_t{2} << 20) + 512,
                                         std::size_t{64} << 10, std::size_t{96} << 20, 12345};

void capture_on(int device, cudaStreamCaptureMode mode, bool warmed) {
  CAPTURE(device, static_cast<int>(mode), warmed);
  REQUIRE(cudaSetDevice(device) == cudaSuccess);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  unsigned long long* wrong = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&wrong), sizeof *wrong) == cudaSuccess);
  REQUIRE(cudaMemset(wrong, 0, sizeof *wrong) == cudaSuccess);
  if (warmed) {
    void* p = nullptr;
    REQUIRE(sovaMallocAsync(&p, std::size_t{4} << 20, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  REQUIRE(cudaStreamBeginCapture(s, mode) == cudaSuccess);
  std::uint32_t tag = 0x1000u * static_cast<std::uint32_t>(device + 1);
  for (std::size_t size : kSizes) {
    void* p = nullptr;
    REQUIRE(sovaMallocAsync(&p, size, s) == cudaSuccess);
    launch_fill(p, size, ++tag, s);
    launch_count_wrong(p, size / 4 * 4, tag, wrong, s);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  void* kept = nullptr;  // left live by the graph: valid after each launch
  REQUIRE(sovaMallocAsync(&kept, std::size_t{1} << 20, s) == cudaSuccess);
  launch_fill(kept, std::size_t{1} << 20, 0xabcdu, s);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);  // sova never invalidates it
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 200; ++i) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  launch_count_wrong(kept, std::size_t{1} << 20, 0xabcdu, wrong, s);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(read_counter(wrong) == 0);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, kept) == cudaSuccess);
  CHECK(attributes.device == device);  // the stream's device's pool
  REQUIRE(sovaFreeAsync(kept, s) == cudaSuccess);
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaFree(wrong) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

}  // namespace

TEST_CASE("C API on the GPU: sovaMallocAsync under capture on every visible device, each current",
          "[gpu][capi][graphs][devices]") {
  CurrentDevice restore;
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  // Device 1 first where there is one: a pool of device 0 never made yet.
  std::vector<int> order;
  for (int d = count - 1; d >= 0; --d) order.push_back(d);
  for (int device : order) {
    for (cudaStreamCaptureMode mode :
         {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
      capture_on(device, mode, /*warmed=*/false);
      capture_on(device, mode, /*warmed=*/true);
    }
  }
}
