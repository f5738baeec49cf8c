// sova_torch — the per-process memory fraction (memory_limit.hpp, sova_torch.h).
#include "memory_limit.hpp"

#include "state.hpp"
#include "tags.hpp"

#include <sova/driver.hpp>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <string>

namespace sova::torch_adapter {
namespace {

std::atomic<sovaTorchExternalReservedFn> g_external{nullptr};

bool valid_device(int device) noexcept { return device >= 0 && device < kMaxDevices; }

}  // namespace

std::uint64_t limit_counted(int device, cudaMemPoolAttr attr) noexcept {
  std::uint64_t sum = tag_pools_attribute(device, attr);
  if (sovaMemPool_t pool = state().devices[device].pool.load(std::memory_order_acquire)) {
    std::uint64_t value = 0;
    if (sovaMemPoolGetAttribute(pool, attr, &value) == cudaSuccess) sum += value;
  }
  if (const sovaTorchExternalReservedFn fn = g_external.load(std::memory_order_acquire)) sum += fn(device);
  return sum;
}

void release_free_memory(int device) noexcept {
  if (sovaMemPool_t pool = state().devices[device].pool.load(std::memory_order_acquire)) (void)sovaMemPoolTrimTo(pool, 0);
  trim_tag_pools(device);
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

void sova_torch_set_memory_fraction(double fraction, int device) {
  if (!valid_device(device))
    throw std::invalid_argument("sova_torch_set_memory_fraction: device " + std::to_string(device) + " out of range");
  if (!(fraction >= 0.0 && fraction <= 1.0))  // NaN fails both
    throw std::invalid_argument("sova_torch_set_memory_fraction: the fraction must be within [0, 1], not " +
                                std::to_string(fraction));
  std::uint64_t limit = kNoLimit;
  if (fraction < 1.0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    const cudaError_t err = sova::process_driver().memory_info(device, &free_bytes, &total_bytes);
    if (err != cudaSuccess)
      throw std::invalid_argument("sova_torch_set_memory_fraction: cannot read the memory of device " +
                                  std::to_string(device) + " (cudaError " + std::to_string(static_cast<int>(err)) +
                                  ")");
    limit = static_cast<std::uint64_t>(fraction * static_cast<double>(total_bytes));
  }
  DeviceState& d = state().devices[device];
  d.limit.store(limit, std::memory_order_relaxed);
  d.fraction.store(fraction, std::memory_order_relaxed);
}

double sova_torch_memory_fraction(int device) {
  return valid_device(device) ? state().devices[device].fraction.load(std::memory_order_relaxed) : 1.0;
}

uint64_t sova_torch_memory_limit(int device) {
  return valid_device(device) ? state().devices[device].limit.load(std::memory_order_relaxed) : kNoLimit;
}

uint64_t sova_torch_reserved_bytes(int device) {
  if (!valid_device(device)) return 0;
  std::uint64_t sum = tag_pools_attribute(device, cudaMemPoolAttrReservedMemCurrent);
  if (sovaMemPool_t pool = state().devices[device].pool.load(std::memory_order_acquire)) {
    std::uint64_t value = 0;
    if (sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value) == cudaSuccess) sum += value;
  }
  return sum;
}

void sova_torch_set_external_reserved_fn(sovaTorchExternalReservedFn fn) {
  g_external.store(fn, std::memory_order_release);
}
