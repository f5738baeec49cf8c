// sova C API — growable buffers (sovaGrowable*). A handle is an id that is
// never reused (a 64-bit count), looked up in the live set under a mutex: a
// destroyed buffer's handle stays invalid even when a new buffer lands at the
// same address (address handles came back valid for the next buffer). None
// of these calls is on a hot path.
#include "capi/capi_errors.hpp"
#include "capi/pool_lifetime.hpp"

#include <sova/growable.hpp>
#include <sova/sova.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>

namespace sova::capi {
namespace {

struct Growables {
  std::mutex mutex;
  std::uint64_t next_id = 1;  // 0 is never a handle (NULL)
  std::unordered_map<std::uint64_t, std::unique_ptr<GrowableBuffer>> live;
};

Growables& growables() {
  static Growables* g = new Growables;  // leaked: buffers may outlive static destruction
  return *g;
}

std::uint64_t id_of(sovaGrowable_t handle) { return reinterpret_cast<std::uintptr_t>(handle); }

/// The live buffer behind `handle`, or nullptr. Caller holds the mutex.
GrowableBuffer* lookup(sovaGrowable_t handle) {
  auto& live = growables().live;
  const auto it = live.find(id_of(handle));
  return it != live.end() ? it->second.get() : nullptr;
}

}  // namespace
}  // namespace sova::capi

using namespace sova::capi;

static cudaError_t sovaGrowableCreate_unchecked(sovaGrowable_t* buffer, void** devPtr, size_t maxSize, int device) {
  if (buffer == nullptr || devPtr == nullptr || maxSize == 0) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_device(device, cudaErrorInvalidDevice); err != cudaSuccess) return err;
  try {
    sova::GrowableOptions options;
    options.device = device;
    options.driver = pools_driver();
    auto made = std::make_unique<sova::GrowableBuffer>(maxSize, options);
    Growables& g = growables();
    std::lock_guard lock(g.mutex);
    const std::uint64_t id = g.next_id++;
    void* const data = made->data();
    g.live.emplace(id, std::move(made));
    *devPtr = data;
    *buffer = reinterpret_cast<sovaGrowable_t>(static_cast<std::uintptr_t>(id));
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaGrowableCreate(sovaGrowable_t* buffer, void** devPtr, size_t maxSize, int device) {
  return checked(__func__, sovaGrowableCreate_unchecked(buffer, devPtr, maxSize, device));
}

static cudaError_t sovaGrowableResize_unchecked(sovaGrowable_t buffer, size_t size, cudaStream_t stream) {
  Growables& g = growables();
  std::lock_guard lock(g.mutex);
  sova::GrowableBuffer* b = lookup(buffer);
  if (b == nullptr) return cudaErrorInvalidValue;
  return b->resize(size, stream);
}
cudaError_t sovaGrowableResize(sovaGrowable_t buffer, size_t size, cudaStream_t stream) {
  return checked(__func__, sovaGrowableResize_unchecked(buffer, size, stream));
}

static cudaError_t sovaGrowableGetInfo_unchecked(sovaGrowable_t buffer, size_t* size, size_t* physicalBytes) {
  Growables& g = growables();
  std::lock_guard lock(g.mutex);
  sova::GrowableBuffer* b = lookup(buffer);
  if (b == nullptr) return cudaErrorInvalidValue;
  if (size != nullptr) *size = b->size();
  if (physicalBytes != nullptr) *physicalBytes = b->physical_bytes();
  return cudaSuccess;
}
cudaError_t sovaGrowableGetInfo(sovaGrowable_t buffer, size_t* size, size_t* physicalBytes) {
  return checked(__func__, sovaGrowableGetInfo_unchecked(buffer, size, physicalBytes));
}

static cudaError_t sovaGrowableDestroy_unchecked(sovaGrowable_t buffer) {
  std::unique_ptr<sova::GrowableBuffer> b;
  {
    Growables& g = growables();
    std::lock_guard lock(g.mutex);
    const auto it = g.live.find(id_of(buffer));
    if (it == g.live.end()) return cudaErrorInvalidValue;
    b = std::move(it->second);
    g.live.erase(it);
  }
  b.reset();  // synchronizes the device: outside the mutex
  return cudaSuccess;
}
cudaError_t sovaGrowableDestroy(sovaGrowable_t buffer) {
  return checked(__func__, sovaGrowableDestroy_unchecked(buffer));
}
