// sova C API — a pool's sleep and wake (sovaMemPoolSleep, sovaMemPoolWake,
// sova.h; sova::Pool::sleep says what they do).
#include "capi/capi_errors.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"
#include "core/raw_enum.hpp"

#include <sova/sova.h>

using namespace sova::capi;
using sova::detail::raw_enum;

static cudaError_t sovaMemPoolSleep_unchecked(sovaMemPool_t pool, sovaSleepMode mode, cudaStream_t stream) {
  const int raw = raw_enum(mode);
  if (raw != sovaSleepBackup && raw != sovaSleepDiscard) {
    note_detail(cudaErrorInvalidValue, "mode is neither sovaSleepBackup nor sovaSleepDiscard");
    return cudaErrorInvalidValue;
  }
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const cudaError_t error =
      e->pool.sleep(raw == sovaSleepBackup ? sova::SleepMode::backup : sova::SleepMode::discard, stream);
  if (error != cudaSuccess) {
    note_detail(error, e->pool.asleep() ? "failed; the pool is asleep (a later sleep finishes the release)"
                                        : "failed; the pool is awake as it was");
  }
  return error;
}
cudaError_t sovaMemPoolSleep(sovaMemPool_t pool, sovaSleepMode mode, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolSleep_unchecked(pool, mode, stream));
}

static cudaError_t sovaMemPoolWake_unchecked(sovaMemPool_t pool, cudaStream_t stream) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const cudaError_t error = e->pool.wake(stream);
  if (error != cudaSuccess) note_detail(error, "failed; the pool is still asleep, nothing was made");
  return error;
}
cudaError_t sovaMemPoolWake(sovaMemPool_t pool, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolWake_unchecked(pool, stream));
}

static cudaError_t sovaMemPoolIsAsleep_unchecked(sovaMemPool_t pool, int* asleep) {
  if (asleep == nullptr) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  *asleep = e->pool.asleep() ? 1 : 0;
  return cudaSuccess;
}
cudaError_t sovaMemPoolIsAsleep(sovaMemPool_t pool, int* asleep) {
  return checked(__func__, sovaMemPoolIsAsleep_unchecked(pool, asleep));
}

static cudaError_t sovaMemPoolReleaseSleepHostMemory_unchecked(sovaMemPool_t pool) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const cudaError_t error = e->pool.release_sleep_host_memory();
  if (error == cudaErrorNotPermitted) note_detail(error, "the pool is asleep: its backups are in that memory");
  return error;
}
cudaError_t sovaMemPoolReleaseSleepHostMemory(sovaMemPool_t pool) {
  return checked(__func__, sovaMemPoolReleaseSleepHostMemory_unchecked(pool));
}

static cudaError_t sovaMemPoolReserveSleepBackup_unchecked(sovaMemPool_t pool, size_t bytes) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const cudaError_t error = e->pool.reserve_sleep_backup(bytes);
  if (error != cudaSuccess) note_detail(error, "pinning host memory failed; the memory held is as before");
  return error;
}
cudaError_t sovaMemPoolReserveSleepBackup(sovaMemPool_t pool, size_t bytes) {
  return checked(__func__, sovaMemPoolReserveSleepBackup_unchecked(pool, bytes));
}
