// sova C API — per-device pools: sovaDeviceGetDefaultMemPool,
// sovaDeviceGetMemPool, sovaDeviceSetMemPool. Device arguments out of range
// give the codes the runtime gives (docs/runtime-errors.md): the
// default-pool query says cudaErrorInvalidDevice, the other two
// cudaErrorInvalidValue.
#include "capi/last_error.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/sova.h>

#include <mutex>

using namespace sova::capi;

static cudaError_t sovaDeviceGetDefaultMemPool_unchecked(sovaMemPool_t* pool, int device) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_device(device, cudaErrorInvalidDevice); err != cudaSuccess) return err;
  PoolEntry* e = nullptr;
  if (const cudaError_t err = ensure_default_pool(device, &e); err != cudaSuccess) return err;
  *pool = HandleTable::to_handle(e);  // default pools are never deleted
  return cudaSuccess;
}
cudaError_t sovaDeviceGetDefaultMemPool(sovaMemPool_t* pool, int device) {
  return checked(__func__, sovaDeviceGetDefaultMemPool_unchecked(pool, device));
}

static cudaError_t sovaDeviceGetMemPool_unchecked(sovaMemPool_t* pool, int device) {
  if (pool == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_device(device, cudaErrorInvalidValue); err != cudaSuccess) return err;
  {
    ReadSection section;
    if (PoolEntry* e = g_state.devices.current(device)) {
      *pool = HandleTable::to_handle(e);
      return cudaSuccess;
    }
  }
  // Nothing set and no default yet: the default is the current pool.
  PoolEntry* e = nullptr;
  if (const cudaError_t err = ensure_default_pool(device, &e); err != cudaSuccess) return err;
  ReadSection section;
  PoolEntry* current = g_state.devices.current(device);
  *pool = HandleTable::to_handle(current != nullptr ? current : e);
  return cudaSuccess;
}
cudaError_t sovaDeviceGetMemPool(sovaMemPool_t* pool, int device) {
  return checked(__func__, sovaDeviceGetMemPool_unchecked(pool, device));
}

static cudaError_t sovaDeviceSetMemPool_unchecked(int device, sovaMemPool_t pool) {
  if (const cudaError_t err = check_device(device, cudaErrorInvalidValue); err != cudaSuccess) return err;
  // Under the mutex: a concurrent sovaMemPoolDestroy either retires the handle
  // first (lookup fails) or reverts the current pool after this store.
  std::lock_guard lock(g_state.mutex);
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  if (e->device != device) return cudaErrorInvalidValue;
  g_state.devices.set_current(device, e);
  return cudaSuccess;
}
cudaError_t sovaDeviceSetMemPool(int device, sovaMemPool_t pool) {
  return checked(__func__, sovaDeviceSetMemPool_unchecked(device, pool));
}
