// libsova_preload.so — the routed runtime calls (docs/c-api.md, "LD_PRELOAD").
//
// Loaded with LD_PRELOAD ahead of libcudart.so, these definitions take the
// place of the runtime's for every caller that reaches the runtime through
// the dynamic linker (a program or library linked with libcudart.so; one
// with the runtime linked in statically never does: static_check.cpp).
//
// What goes where:
//   - allocation from the current pool, and the default/current pool calls:
//     sova, unless the program made one of the runtime's own pools current
//     (cudaDeviceSetMemPool with a runtime pool), which then serves the
//     device as the runtime would;
//   - pool handles: sova's handles carry a tag in their low bits
//     (lib/capi/handle_table.hpp: 0b0101) that no runtime handle (a pointer)
//     has, so every call taking a cudaMemPool_t tells them apart without a
//     table: tagged to sova (which validates them: a destroyed one gives
//     cudaErrorInvalidValue), others to the runtime;
//   - cudaMemPoolCreate: sova for what it serves (pinned device memory, no
//     export handle types, no special usage); the runtime for the rest (IPC
//     pools, host pools), so such programs keep working;
//   - frees: sova's if the pointer lies in a sova pool (sova then answers,
//     double frees included), the runtime's otherwise (cudaMalloc memory,
//     runtime pools), as the runtime allows; cudaFree too, since the runtime
//     lets it free cudaMallocAsync memory (after synchronizing the device).
// The runtime's functions are looked up with dlsym(RTLD_NEXT): the next
// definition after this library, libcudart.so's.
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"
#include "capi/stream_devices.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <dlfcn.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace sova::preload {
namespace {

/// The runtime's own definition of `name`; exits with a message if there is
/// none (the program's libcudart lacks a function its own headers declared:
/// no way to go on correctly).
void* real_symbol(const char* name) noexcept {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "sova preload: the CUDA runtime has no %s (%s); cannot forward to it\n", name, dlerror());
    std::abort();
  }
  return f;
}

#define SOVA_REAL(name) \
  ([]() noexcept { \
    static auto* const f = reinterpret_cast<decltype(&::name)>(real_symbol(#name)); \
    return f; \
  }())

constexpr std::uintptr_t kSovaTagMask = 0xF;
constexpr std::uintptr_t kSovaTag = 0b0101;

inline bool is_sova(cudaMemPool_t pool) noexcept {
  return (reinterpret_cast<std::uintptr_t>(pool) & kSovaTagMask) == kSovaTag;
}
inline sovaMemPool_t to_sova(cudaMemPool_t pool) noexcept { return reinterpret_cast<sovaMemPool_t>(pool); }
inline cudaMemPool_t to_cuda(sovaMemPool_t pool) noexcept { return reinterpret_cast<cudaMemPool_t>(pool); }

/// The device of the sova pool whose VA range holds `ptr` (live or not), or -1.
int sova_device_of(const void* ptr) noexcept {
  capi::ReadSection section;
  const capi::PoolEntry* e = capi::g_state.owners.find(ptr);
  return e != nullptr ? e->device : -1;
}
bool in_sova(const void* ptr) noexcept { return sova_device_of(ptr) >= 0; }

// Devices whose current pool is one of the runtime's (cudaDeviceSetMemPool
// with an untagged handle): cudaMallocAsync there goes to the runtime.
constexpr int kDevices = 64;
std::array<std::atomic<cudaMemPool_t>, kDevices> g_runtime_current{};
std::atomic<int> g_runtime_current_count{0};

cudaMemPool_t runtime_current(int device) noexcept {
  if (device < 0 || device >= kDevices) return nullptr;
  return g_runtime_current[device].load(std::memory_order_acquire);
}

void set_runtime_current(int device, cudaMemPool_t pool) noexcept {
  if (device < 0 || device >= kDevices) return;
  const cudaMemPool_t old = g_runtime_current[device].exchange(pool, std::memory_order_acq_rel);
  if (old == nullptr && pool != nullptr) g_runtime_current_count.fetch_add(1, std::memory_order_relaxed);
  if (old != nullptr && pool == nullptr) g_runtime_current_count.fetch_sub(1, std::memory_order_relaxed);
}

/// The runtime pool current on `stream`'s device, or nullptr when sova serves it.
cudaMemPool_t runtime_pool_for(cudaStream_t stream) noexcept {
  if (g_runtime_current_count.load(std::memory_order_relaxed) == 0) return nullptr;
  int device = 0;
  if (capi::stream_device_of(*capi::pools_driver(), stream, &device) != cudaSuccess) return nullptr;
  return runtime_current(device);
}

bool sova_serves(const cudaMemPoolProps* props) noexcept {
  bool plain_usage = true;
  if constexpr (requires { props->usage; }) plain_usage = props->usage == 0;
  return props->allocType == cudaMemAllocationTypePinned && props->location.type == cudaMemLocationTypeDevice &&
         props->handleTypes == cudaMemHandleTypeNone && props->win32SecurityAttributes == nullptr && plain_usage;
}

}  // namespace
}  // namespace sova::preload

using namespace sova::preload;

// The exported names: the runtime's (lib/preload/preload.map.in lists them).
// The library builds with hidden visibility; these must be seen.
#pragma GCC visibility push(default)
extern "C" {

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (cudaMemPool_t pool = runtime_pool_for(stream)) [[unlikely]]
    return SOVA_REAL(cudaMallocFromPoolAsync)(devPtr, size, pool, stream);
  return sovaMallocAsync(devPtr, size, stream);
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream) {
  if (cudaMemPool_t pool = runtime_pool_for(stream == nullptr ? cudaStreamPerThread : stream)) [[unlikely]]
    return SOVA_REAL(cudaMallocFromPoolAsync)(devPtr, size, pool, stream == nullptr ? cudaStreamPerThread : stream);
  return sovaMallocAsync_ptsz(devPtr, size, stream);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  const cudaError_t err = sovaFreeAsync(devPtr, stream);
  if (err != cudaErrorInvalidValue || in_sova(devPtr)) return err;
  return SOVA_REAL(cudaFreeAsync)(devPtr, stream);
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream) {
  const cudaError_t err = sovaFreeAsync_ptsz(devPtr, stream);
  if (err != cudaErrorInvalidValue || in_sova(devPtr)) return err;
  return SOVA_REAL(cudaFreeAsync)(devPtr, stream == nullptr ? cudaStreamPerThread : stream);
}

// The runtime's cudaFree frees cudaMallocAsync memory too, synchronizing the
// device first: a sova pointer is freed the same way (its pool's device
// synchronized, then freed on the legacy stream, whose work is complete).
// Double and interior frees get sova's answer, as with cudaFreeAsync.
cudaError_t cudaFree(void* devPtr) {
  const int device = devPtr != nullptr ? sova_device_of(devPtr) : -1;
  if (device < 0) return SOVA_REAL(cudaFree)(devPtr);
  if (const cudaError_t err = sova::capi::pools_driver()->device_synchronize(device); err != cudaSuccess) return err;
  return sovaFreeAsync(devPtr, cudaStreamLegacy);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (is_sova(memPool)) return sovaMallocFromPoolAsync(ptr, size, to_sova(memPool), stream);
  return SOVA_REAL(cudaMallocFromPoolAsync)(ptr, size, memPool, stream);
}

cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (is_sova(memPool)) return sovaMallocFromPoolAsync_ptsz(ptr, size, to_sova(memPool), stream);
  return SOVA_REAL(cudaMallocFromPoolAsync)(ptr, size, memPool, stream == nullptr ? cudaStreamPerThread : stream);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const struct cudaMemPoolProps* poolProps) {
  if (memPool == nullptr || poolProps == nullptr) return cudaErrorInvalidValue;
  if (!sova_serves(poolProps)) return SOVA_REAL(cudaMemPoolCreate)(memPool, poolProps);
  sovaMemPoolProps props{};
  props.device = poolProps->location.id;
  props.maxSize = poolProps->maxSize;
  sovaMemPool_t pool = nullptr;
  const cudaError_t err = sovaMemPoolCreate(&pool, &props);
  if (err == cudaSuccess) *memPool = to_cuda(pool);
  return err;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolDestroy)(memPool);
  return sovaMemPoolDestroy(to_sova(memPool));
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolSetAttribute)(memPool, attr, value);
  return sovaMemPoolSetAttribute(to_sova(memPool), attr, value);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void* value) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolGetAttribute)(memPool, attr, value);
  return sovaMemPoolGetAttribute(to_sova(memPool), attr, value);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolTrimTo)(memPool, minBytesToKeep);
  return sovaMemPoolTrimTo(to_sova(memPool), minBytesToKeep);
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc* descList, size_t count) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolSetAccess)(memPool, descList, count);
  return sovaMemPoolSetAccess(to_sova(memPool), descList, count);
}

cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags* flags, cudaMemPool_t memPool,
                                 struct cudaMemLocation* location) {
  if (!is_sova(memPool)) return SOVA_REAL(cudaMemPoolGetAccess)(flags, memPool, location);
  return sovaMemPoolGetAccess(flags, to_sova(memPool), location);
}

// sova pools have no export handle types (sovaMemPoolProps::handleTypes is
// cudaMemHandleTypeNone only): exporting them or their memory is refused.
cudaError_t cudaMemPoolExportToShareableHandle(void* shareableHandle, cudaMemPool_t memPool,
                                               enum cudaMemAllocationHandleType handleType, unsigned int flags) {
  if (!is_sova(memPool)) {
    return SOVA_REAL(cudaMemPoolExportToShareableHandle)(shareableHandle, memPool, handleType, flags);
  }
  return cudaErrorNotSupported;
}

cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData* exportData, void* ptr) {
  if (!in_sova(ptr)) return SOVA_REAL(cudaMemPoolExportPointer)(exportData, ptr);
  return cudaErrorNotSupported;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  sovaMemPool_t pool = nullptr;
  const cudaError_t err = sovaDeviceGetDefaultMemPool(memPool == nullptr ? nullptr : &pool, device);
  if (err == cudaSuccess) *memPool = to_cuda(pool);
  return err;
}

cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool) {
  if (!is_sova(memPool)) {
    // A runtime pool (or garbage, which the runtime judges): current for the
    // runtime, and for cudaMallocAsync on that device from now on.
    const cudaError_t err = SOVA_REAL(cudaDeviceSetMemPool)(device, memPool);
    if (err == cudaSuccess) set_runtime_current(device, memPool);
    return err;
  }
  const cudaError_t err = sovaDeviceSetMemPool(device, to_sova(memPool));
  if (err == cudaSuccess) set_runtime_current(device, nullptr);
  return err;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* memPool, int device) {
  if (memPool != nullptr) {
    if (cudaMemPool_t pool = runtime_current(device)) {
      *memPool = pool;
      return cudaSuccess;
    }
  }
  sovaMemPool_t pool = nullptr;
  const cudaError_t err = sovaDeviceGetMemPool(memPool == nullptr ? nullptr : &pool, device);
  if (err == cudaSuccess) *memPool = to_cuda(pool);
  return err;
}

}  // extern "C"
#pragma GCC visibility pop
