// sova C API — growable buffers (sovaGrowable*). Handles are the objects'
// addresses, validated against the set of live ones under a mutex (never
// dereferenced unchecked); none of these calls is on a hot path.
#include "capi/capi_errors.hpp"
#include "capi/pool_lifetime.hpp"

#include <sova/growable.hpp>
#include <sova/sova.h>

#include <mutex>
#include <new>
#include <unordered_set>

namespace sova::capi {
namespace {

struct Growables {
  std::mutex mutex;
  std::unordered_set<GrowableBuffer*> live;
};

Growables& growables() {
  static Growables* g = new Growables;  // leaked: buffers may outlive static destruction
  return *g;
}

GrowableBuffer* lookup(sovaGrowable_t handle) {
  auto* b = reinterpret_cast<GrowableBuffer*>(handle);
  return growables().live.count(b) != 0 ? b : nullptr;
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
    g.live.insert(made.get());
    *devPtr = made->data();
    *buffer = reinterpret_cast<sovaGrowable_t>(made.release());
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
  sova::GrowableBuffer* b = nullptr;
  {
    Growables& g = growables();
    std::lock_guard lock(g.mutex);
    b = lookup(buffer);
    if (b == nullptr) return cudaErrorInvalidValue;
    g.live.erase(b);
  }
  delete b;  // synchronizes the device: outside the mutex
  return cudaSuccess;
}
cudaError_t sovaGrowableDestroy(sovaGrowable_t buffer) {
  return checked(__func__, sovaGrowableDestroy_unchecked(buffer));
}
