// sova C API — IPC: sovaMemPoolExportToShareableHandle,
// sovaMemPoolImportFromShareableHandle, sovaMemPoolExportPointer,
// sovaMemPoolImportPointer, and what the other entry points do with imported
// pools (imported_pools.hpp). The machinery is sova/ipc.hpp's; docs/ipc.md
// has the design and docs/c-api.md the codes.
#include "capi/capi_errors.hpp"
#include "capi/imported_pools.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/ipc.hpp>
#include <sova/sova.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace sova::capi {
namespace {

struct Imported {
  std::mutex mutex;
  std::uint64_t next_id = 1;
  std::map<std::uintptr_t, std::unique_ptr<ImportedPool>> pools;  ///< by handle
};

Imported& imported() {
  static Imported* i = new Imported;  // leaked: imports may outlive static destruction
  return *i;
}

/// The pool's exporter, made on first use. The pool must be exportable.
cudaError_t exporter_of(PoolEntry* e, PoolExporter** out) noexcept {
  if (PoolExporter* x = e->exporter.load(std::memory_order_acquire)) {
    *out = x;
    return cudaSuccess;
  }
  std::lock_guard lock(g_state.mutex);
  PoolExporter* x = e->exporter.load(std::memory_order_relaxed);
  if (x == nullptr) {
    try {
      x = new PoolExporter(e->pool);
    } catch (...) {
      return error_from_current_exception();  // not exportable: cudaErrorInvalidValue
    }
    e->exporter.store(x, std::memory_order_release);
  }
  *out = x;
  return cudaSuccess;
}

}  // namespace

cudaError_t free_imported(void* ptr, cudaStream_t stream) noexcept {
  Imported& im = imported();
  std::lock_guard lock(im.mutex);
  for (auto& [handle, pool] : im.pools) {
    if (pool->contains(ptr)) return pool->free_pointer(ptr, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t destroy_imported(sovaMemPool_t handle) noexcept {
  std::unique_ptr<ImportedPool> gone;
  {
    Imported& im = imported();
    std::lock_guard lock(im.mutex);
    auto it = im.pools.find(reinterpret_cast<std::uintptr_t>(handle));
    if (it == im.pools.end()) return cudaErrorInvalidValue;
    gone = std::move(it->second);
    im.pools.erase(it);
  }
  return cudaSuccess;  // `gone` synchronizes and unmaps outside the mutex
}

cudaError_t set_imported_access(sovaMemPool_t handle, const cudaMemAccessDesc* descs, size_t count) noexcept {
  Imported& im = imported();
  std::lock_guard lock(im.mutex);
  auto it = im.pools.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == im.pools.end() || (descs == nullptr && count != 0)) return cudaErrorInvalidValue;
  for (size_t i = 0; i < count; ++i) {
    // The importer's own device: read-only or read-write. Others: not built.
    if (descs[i].location.type != cudaMemLocationTypeDevice || descs[i].location.id != it->second->device())
      return cudaErrorInvalidDevice;
  }
  for (size_t i = 0; i < count; ++i) {
    if (const cudaError_t err = it->second->set_access(descs[i].flags); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t get_imported_access(cudaMemAccessFlags* flags, sovaMemPool_t handle,
                                const cudaMemLocation* location) noexcept {
  Imported& im = imported();
  std::lock_guard lock(im.mutex);
  auto it = im.pools.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == im.pools.end() || flags == nullptr || location == nullptr) return cudaErrorInvalidValue;
  if (location->type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
  *flags = location->id == it->second->device() ? it->second->access() : cudaMemAccessFlagsProtNone;
  return cudaSuccess;
}

}  // namespace sova::capi

using namespace sova::capi;

static cudaError_t sovaMemPoolExportToShareableHandle_unchecked(void* shareableHandle, sovaMemPool_t pool,
                                                                enum cudaMemAllocationHandleType handleType,
                                                                unsigned int flags) {
  if (shareableHandle == nullptr || flags != 0) return cudaErrorInvalidValue;
  if (handleType == cudaMemHandleTypeFabric) return cudaErrorNotSupported;
  if (handleType != cudaMemHandleTypePosixFileDescriptor) return cudaErrorInvalidValue;
  sova::PoolExporter* x = nullptr;
  {
    ReadSection section;
    PoolEntry* e = g_state.handles.lookup(pool);
    if (e == nullptr) return note_pool_handle_refused(pool);
    if (const cudaError_t err = exporter_of(e, &x); err != cudaSuccess) return err;
    cudaError_t err = cudaSuccess;
    const int fd = x->share(&err);
    if (fd < 0) return err;
    *static_cast<int*>(shareableHandle) = fd;
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolExportToShareableHandle(void* shareableHandle, sovaMemPool_t pool,
                                               enum cudaMemAllocationHandleType handleType, unsigned int flags) {
  return checked(__func__, sovaMemPoolExportToShareableHandle_unchecked(shareableHandle, pool, handleType, flags));
}

static cudaError_t sovaMemPoolExportPointer_unchecked(cudaMemPoolPtrExportData* exportData, void* ptr) {
  if (exportData == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.owners.find(ptr);
  if (e == nullptr) return cudaErrorInvalidValue;
  sova::PoolExporter* x = nullptr;
  if (const cudaError_t err = exporter_of(e, &x); err != cudaSuccess) return err;
  return x->export_pointer(ptr, exportData);
}
cudaError_t sovaMemPoolExportPointer(cudaMemPoolPtrExportData* exportData, void* ptr) {
  return checked(__func__, sovaMemPoolExportPointer_unchecked(exportData, ptr));
}

static cudaError_t sovaMemPoolImportFromShareableHandle_unchecked(sovaMemPool_t* pool, void* shareableHandle,
                                                                  enum cudaMemAllocationHandleType handleType,
                                                                  unsigned int flags) {
  if (pool == nullptr || flags != 0) return cudaErrorInvalidValue;
  if (handleType == cudaMemHandleTypeFabric) return cudaErrorNotSupported;
  if (handleType != cudaMemHandleTypePosixFileDescriptor) return cudaErrorInvalidValue;
  // As the runtime: the descriptor itself, cast to a pointer.
  const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(shareableHandle));
  try {
    sova::ImportOptions options;
    options.driver = pools_driver();
    auto made = std::make_unique<sova::ImportedPool>(fd, options);
    Imported& im = imported();
    std::lock_guard lock(im.mutex);
    const std::uintptr_t handle = (im.next_id++ << 4) | kImportedTag;
    im.pools.emplace(handle, std::move(made));
    *pool = reinterpret_cast<sovaMemPool_t>(handle);
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolImportFromShareableHandle(sovaMemPool_t* pool, void* shareableHandle,
                                                 enum cudaMemAllocationHandleType handleType, unsigned int flags) {
  return checked(__func__, sovaMemPoolImportFromShareableHandle_unchecked(pool, shareableHandle, handleType, flags));
}

static cudaError_t sovaMemPoolImportPointer_unchecked(void** ptr, sovaMemPool_t pool,
                                                      cudaMemPoolPtrExportData* exportData) {
  if (ptr == nullptr || exportData == nullptr) return cudaErrorInvalidValue;
  Imported& im = imported();
  std::lock_guard lock(im.mutex);
  auto it = im.pools.find(reinterpret_cast<std::uintptr_t>(pool));
  if (it == im.pools.end()) return cudaErrorInvalidValue;
  return it->second->import_pointer(*exportData, ptr);
}
cudaError_t sovaMemPoolImportPointer(void** ptr, sovaMemPool_t pool, cudaMemPoolPtrExportData* exportData) {
  return checked(__func__, sovaMemPoolImportPointer_unchecked(ptr, pool, exportData));
}
