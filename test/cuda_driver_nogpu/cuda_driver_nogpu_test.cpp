// The real CUDA driver on whatever machine runs the sim suite. Without a GPU
// or driver (CI) every method must answer with the runtime's error, never
// crash; with a GPU (the sim suite also runs on the GPU machine) the device
// queries must be sane. Both branches leave no allocation behind.
#include "support/catch.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

using namespace sova;

namespace {

// What the runtime says when there is nothing to run on.
bool is_no_device_error(cudaError_t e) {
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady: return true;
    default: return false;
  }
}

bool is_power_of_two(std::size_t v) { return v != 0 && (v & (v - 1)) == 0; }

void check_device_zero_is_sane(Driver& d, int count) {
  DeviceInfo info;
  REQUIRE(d.device_info(0, &info) == cudaSuccess);
  CHECK(info.ordinal == 0);
  CHECK(std::strlen(info.name) > 0);
  CHECK(info.total_memory > 0);
  CHECK(info.vmm_supported);
  CHECK(is_power_of_two(info.granularity));
  CHECK(info.granularity >= (std::size_t{2} << 20));
  CHECK(info.recommended_granularity >= info.granularity);
  CHECK(info.recommended_granularity % info.granularity == 0);

  CHECK(d.device_info(count, &info) == cudaErrorInvalidDevice);
  CHECK(d.device_info(-1, &info) == cudaErrorInvalidDevice);
  CHECK(d.device_info(0, nullptr) == cudaErrorInvalidValue);

  std::size_t free_b = 0, total_b = 0;
  REQUIRE(d.memory_info(0, &free_b, &total_b) == cudaSuccess);
  CHECK(total_b > 0);
  CHECK(free_b <= total_b);
  CHECK(d.memory_info(count, &free_b, &total_b) == cudaErrorInvalidDevice);
}

void check_everything_fails(Driver& d, cudaError_t why) {
  // The load error is fixed for the process: every later call repeats it.
  int count = -1;
  CHECK(d.device_count(&count) == why);
  CHECK(count == 0);

  DeviceInfo info;
  std::strcpy(info.name, "untouched");
  CHECK(d.device_info(0, &info) == why);
  CHECK(std::strcmp(info.name, "untouched") == 0);  // nothing changed on failure

  std::size_t free_b = 1, total_b = 1;
  CHECK(d.memory_info(0, &free_b, &total_b) != cudaSuccess);
  CHECK(free_b == 1);
  CHECK(d.device_synchronize(0) != cudaSuccess);

  std::uintptr_t va = 0x1234;
  CHECK(d.address_reserve(std::size_t{64} << 20, 0, &va) != cudaSuccess);
  CHECK(va == 0x1234);
  CHECK(d.address_free(0x1000000, std::size_t{2} << 20) != cudaSuccess);

  PhysicalHandle h = 77;
  CHECK(d.physical_create(0, std::size_t{2} << 20, &h) != cudaSuccess);
  CHECK(h == 77);
  CHECK(d.physical_release(77) != cudaSuccess);
  CHECK(d.map(0x1000000, std::size_t{2} << 20, 77) != cudaSuccess);
  CHECK(d.unmap(0x1000000, std::size_t{2} << 20) != cudaSuccess);
  cudaMemAccessDesc desc = {};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(d.set_access(0x1000000, std::size_t{2} << 20, &desc, 1) != cudaSuccess);

  EventHandle ev = nullptr;
  CHECK(d.event_create(&ev) != cudaSuccess);
  CHECK(ev == nullptr);
  CHECK(d.event_create_on(0, &ev) != cudaSuccess);
  CHECK(ev == nullptr);
  CHECK(d.stream_query(nullptr) != cudaSuccess);
  CHECK(d.stream_synchronize(nullptr) != cudaSuccess);
  bool capturing = true;
  CHECK(d.stream_is_capturing(nullptr, &capturing) != cudaSuccess);
  unsigned long long id = 5;
  CHECK(d.stream_id(nullptr, &id) != cudaSuccess);
  CHECK(id == 5);
}

}  // namespace

TEST_CASE("cuda driver: errors, not crashes, without a GPU; sane with one", "[cuda_driver]") {
  Driver& d = cuda_driver();
  CHECK(std::strcmp(d.name(), "cuda") == 0);
  CHECK(&d == &cuda_driver());  // one process-wide driver

  int count = -1;
  const cudaError_t e = d.device_count(&count);
  if (e == cudaSuccess && count > 0) {
    INFO("a GPU is present: checking device 0");
    check_device_zero_is_sane(d, count);
  } else {
    INFO("no GPU: device_count said " << cudaGetErrorName(e) << ", count " << count);
    CHECK(is_no_device_error(e));
    check_everything_fails(d, e);
  }
}

TEST_CASE("cuda driver: argument checks need no GPU", "[cuda_driver]") {
  Driver& d = cuda_driver();
  CHECK(d.device_count(nullptr) == cudaErrorInvalidValue);
  CHECK(d.current_device(nullptr) == cudaErrorInvalidValue);
  CHECK(d.device_info(0, nullptr) == cudaErrorInvalidValue);
  std::size_t b = 0;
  CHECK(d.memory_info(0, nullptr, &b) == cudaErrorInvalidValue);
  CHECK(d.address_reserve(std::size_t{2} << 20, 0, nullptr) == cudaErrorInvalidValue);
  CHECK(d.physical_create(0, std::size_t{2} << 20, nullptr) == cudaErrorInvalidValue);
  CHECK(d.set_access(0x1000000, std::size_t{2} << 20, nullptr, 1) == cudaErrorInvalidValue);
  cudaMemAccessDesc desc = {};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(d.set_access(0x1000000, std::size_t{2} << 20, &desc, 0) == cudaErrorInvalidValue);
  desc.flags = static_cast<cudaMemAccessFlags>(2);  // no such protection
  CHECK(d.set_access(0x1000000, std::size_t{2} << 20, &desc, 1) == cudaErrorInvalidValue);
  CHECK(d.event_create(nullptr) == cudaErrorInvalidValue);
  CHECK(d.event_create_on(0, nullptr) == cudaErrorInvalidValue);
  CHECK(d.stream_is_capturing(nullptr, nullptr) == cudaErrorInvalidValue);
  CHECK(d.stream_id(nullptr, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("cuda driver: leaves the runtime's last error clean", "[cuda_driver]") {
  Driver& d = cuda_driver();
  int count = 0;
  if (d.device_count(&count) != cudaSuccess || count == 0) {
    // Without a driver every runtime call fails and records that; there is
    // no clean state to preserve.
    SUCCEED("no GPU");
    return;
  }
  REQUIRE(cudaGetLastError() == cudaSuccess);
  DeviceInfo info;
  CHECK(d.device_info(count, &info) == cudaErrorInvalidDevice);
  CHECK(d.event_query(nullptr) != cudaSuccess);  // a failing runtime call
  CHECK(cudaGetLastError() == cudaSuccess);
}
