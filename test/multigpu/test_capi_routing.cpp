// The C API's cudaMallocAsync routing across devices: a stream's allocations
// come from its own device's current pool whichever device is current, without
// asking the driver on every call (lib/capi/stream_devices.hpp).
#include "multigpu/require_devices.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace {

struct CurrentDevice {  // puts the caller's device back
  int saved = 0;
  CurrentDevice() { REQUIRE(cudaGetDevice(&saved) == cudaSuccess); }
  ~CurrentDevice() { cudaSetDevice(saved); }
};

}  // namespace

TEST_CASE("C API: a stream of device 1 used while device 0 is current allocates on device 1",
          "[multigpu][capi]") {
  SOVA_REQUIRE_DEVICES(2);
  CurrentDevice restore;
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1 = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, std::size_t{8} << 20, s1) == cudaSuccess);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
  CHECK(attributes.device == 1);
  REQUIRE(sovaFreeAsync(p, s1) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s1) == cudaSuccess);
}

TEST_CASE("C API: a destroyed stream's handle reused on another device allocates on the new device",
          "[multigpu][capi]") {
  SOVA_REQUIRE_DEVICES(2);
  CurrentDevice restore;
  // The driver hands a destroyed stream's handle to the next stream made
  // (docs/benchmarks.md, "Driver costs"): try until it does, across devices.
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t first = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, std::size_t{2} << 20, first) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, first) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(first) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(first) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t second = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking) == cudaSuccess);
  INFO("handle reused across devices: " << (second == first));
  REQUIRE(cudaSetDevice(0) == cudaSuccess);  // the cache, and the current device, say device 0
  REQUIRE(sovaMallocAsync(&p, std::size_t{2} << 20, second) == cudaSuccess);
  cudaPointerAttributes attributes{};
  REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
  CHECK(attributes.device == 1);
  REQUIRE(sovaFreeAsync(p, second) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(second) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(second) == cudaSuccess);
}
