#include "driver/cuda/context.hpp"

#include "driver/cuda/entry_points.hpp"
#include "driver/cuda/error_map.hpp"
#include "driver/cuda/runtime_call.hpp"

#include <atomic>

namespace sova::cuda_detail {

namespace {

// Primary context per device, retained on first use. Constant-initialised and
// trivially destructible, so it is usable during static destruction too.
std::atomic<CUcontext> g_primary[kMaxDevices];

cudaError_t primary_context(int device, CUcontext* out) noexcept {
  if (const cudaError_t err = check_device(device); err != cudaSuccess) return err;
  std::atomic<CUcontext>& slot = g_primary[device];
  if (CUcontext ctx = slot.load(std::memory_order_acquire)) {
    *out = ctx;
    return cudaSuccess;
  }
  // No lock: two threads may both retain. Each device has exactly one
  // primary context, so both get the same handle; the extra retain only
  // raises a reference count we never drop anyway.
  const EntryPoints& cu = entry_points();
  CUdevice dev = 0;
  if (CUresult r = cu.device_get(&dev, device); r != CUDA_SUCCESS) return to_runtime_error(r);
  CUcontext ctx = nullptr;
  if (CUresult r = cu.device_primary_ctx_retain(&ctx, dev); r != CUDA_SUCCESS) {
    return to_runtime_error(r);
  }
  slot.store(ctx, std::memory_order_release);
  *out = ctx;
  return cudaSuccess;
}

}  // namespace

cudaError_t check_device(int device) noexcept {
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) return cu.status;
  if (device < 0 || device >= cu.device_count || device >= kMaxDevices) {
    return cudaErrorInvalidDevice;
  }
  return cudaSuccess;
}

ScopedContext::ScopedContext(int device) noexcept { enter(device); }

ScopedContext::ScopedContext(AnyContext) noexcept {
  const EntryPoints& cu = entry_points();
  if (cu.status != cudaSuccess) {
    status_ = cu.status;
    return;
  }
  CUcontext current = nullptr;
  if (CUresult r = cu.ctx_get_current(&current); r != CUDA_SUCCESS) {
    status_ = to_runtime_error(r);
    return;
  }
  if (current != nullptr) return;  // the common case: one cheap query
  // cudaGetDevice reads the thread's device setting without creating a context.
  int device = 0;
  if (cudaError_t err = quiet([&] { return cudaGetDevice(&device); }); err != cudaSuccess) {
    status_ = err;
    return;
  }
  enter(device);
}

void ScopedContext::enter(int device) noexcept {
  const EntryPoints& cu = entry_points();
  CUcontext target = nullptr;
  if (status_ = primary_context(device, &target); status_ != cudaSuccess) return;
  if (CUresult r = cu.ctx_get_current(&saved_); r != CUDA_SUCCESS) {
    status_ = to_runtime_error(r);
    return;
  }
  if (saved_ == target) return;
  if (CUresult r = cu.ctx_set_current(target); r != CUDA_SUCCESS) {
    status_ = to_runtime_error(r);
    return;
  }
  switched_ = true;
}

ScopedContext::~ScopedContext() {
  // Restoring the caller's own (possibly null) context cannot meaningfully
  // fail; if it did there is nothing better to do than keep going.
  if (switched_) (void)entry_points().ctx_set_current(saved_);
}

}  // namespace sova::cuda_detail
