// StreamDevices (stream_devices.hpp): the process's cache and its slow path.
#include "capi/stream_devices.hpp"

namespace sova::capi {

constinit StreamDevices g_stream_devices;
static_assert(std::is_trivially_destructible_v<StreamDevices>, "usable during static destruction");

[[gnu::noinline]] cudaError_t ask_stream_device(Driver& driver, cudaStream_t stream, int* device) noexcept {
  // Allowed under capture (Driver::stream_device).
  if (const cudaError_t err = driver.stream_device(stream, device); err != cudaSuccess) return err;
  g_stream_devices.remember(stream, *device);
  return cudaSuccess;
}

}  // namespace sova::capi
