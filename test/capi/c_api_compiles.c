/* The C API from C: every function of sova.h, compiled as C11 and linked
 * against the shared library. Run with SOVA_DRIVER=sim it is also a smoke
 * test of the whole life of a pool; exit status 0 means every call returned
 * what it should. */
#include <sova/sova.h>

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void expect(const char* what, cudaError_t got, cudaError_t want) {
  if (got != want) {
    fprintf(stderr, "%s: got %d, want %d\n", what, (int)got, (int)want);
    ++failures;
  }
}

int main(void) {
  cudaStream_t stream = cudaStreamPerThread;
  sovaMemPool_t def = NULL, current = NULL, pool = NULL, sleeper = NULL;
  sovaMemPoolProps props;
  sovaMemPoolStats stats;
  void* p = NULL;
  unsigned long long value = 0;
  int on = 1;
  struct cudaMemAccessDesc desc;
  struct cudaMemLocation location;
  enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;

  expect("GetDefaultMemPool", sovaDeviceGetDefaultMemPool(&def, 0), cudaSuccess);
  expect("GetMemPool", sovaDeviceGetMemPool(&current, 0), cudaSuccess);
  if (current != def) expect("current is default", cudaErrorUnknown, cudaSuccess);

  memset(&props, 0, sizeof props);
  props.device = 0;
  props.policy = sovaPolicyDefault;
  props.maxSize = 0;
  props.handleTypes = cudaMemHandleTypeNone;
  expect("MemPoolCreate", sovaMemPoolCreate(&pool, &props), cudaSuccess);
  expect("SetMemPool", sovaDeviceSetMemPool(0, pool), cudaSuccess);

  expect("MallocAsync", sovaMallocAsync(&p, 1000, stream), cudaSuccess);
  expect("GetAttribute", sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value), cudaSuccess);
  if (value != 1000) expect("used == 1000", cudaErrorUnknown, cudaSuccess);
  expect("FreeAsync", sovaFreeAsync(p, stream), cudaSuccess);
  expect("MallocAsync_ptsz", sovaMallocAsync_ptsz(&p, 64, NULL), cudaSuccess);
  expect("FreeAsync_ptsz", sovaFreeAsync_ptsz(p, NULL), cudaSuccess);
  expect("MallocFromPoolAsync", sovaMallocFromPoolAsync(&p, 4096, pool, stream), cudaSuccess);
  expect("FreeAsync (double)", sovaFreeAsync(p, stream), cudaSuccess);
  expect("FreeAsync (double)", sovaFreeAsync(p, stream), cudaErrorInvalidValue);
  expect("MallocFromPoolAsync_ptsz", sovaMallocFromPoolAsync_ptsz(&p, 16, pool, NULL), cudaSuccess);
  expect("FreeAsync", sovaFreeAsync(p, stream), cudaSuccess);

  expect("SetAttribute", sovaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &on), cudaSuccess);
  expect("TrimTo", sovaMemPoolTrimTo(pool, 0), cudaSuccess);

  memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  expect("SetAccess", sovaMemPoolSetAccess(pool, &desc, 1), cudaSuccess);
  location = desc.location;
  expect("GetAccess", sovaMemPoolGetAccess(&flags, pool, &location), cudaSuccess);
  if (flags != cudaMemAccessFlagsProtReadWrite) expect("flags", cudaErrorUnknown, cudaSuccess);

  expect("MemPoolDestroy", sovaMemPoolDestroy(pool), cudaSuccess);

  /* Sleep's host memory budget and pin-ahead, from C. */
  props.flags = sovaMemPoolSleepPinAhead;
  props.sleepHostBudget = 4u << 20;
  expect("MemPoolCreate (pin-ahead)", sovaMemPoolCreate(&sleeper, &props), cudaSuccess);
  expect("MallocFromPoolAsync (sleeper)", sovaMallocFromPoolAsync(&p, 1000, sleeper, stream), cudaSuccess);
  expect("ReserveSleepBackup (beyond the budget)", sovaMemPoolReserveSleepBackup(sleeper, 8u << 20),
         cudaErrorMemoryAllocation);
  memset(&stats, 0, sizeof stats);
  stats.structSize = sizeof stats;
  expect("GetStats", sovaMemPoolGetStats(sleeper, &stats), cudaSuccess);
  if (stats.sleepHostBudget != (4u << 20) || stats.sleepBudgetRefusals != 1)
    expect("sleepHostBudget, sleepBudgetRefusals", cudaErrorUnknown, cudaSuccess);
  expect("Sleep", sovaMemPoolSleep(sleeper, sovaSleepBackup, stream), cudaSuccess);
  expect("WakeSynchronize", sovaMemPoolWakeSynchronize(sleeper, stream), cudaSuccess);
  expect("ReleaseSleepHostMemory", sovaMemPoolReleaseSleepHostMemory(sleeper), cudaSuccess);
  expect("FreeAsync (sleeper)", sovaFreeAsync(p, stream), cudaSuccess);
  expect("MemPoolDestroy (sleeper)", sovaMemPoolDestroy(sleeper), cudaSuccess);

  expect("MemPoolDestroy (again)", sovaMemPoolDestroy(pool), cudaErrorInvalidValue);
  expect("GetMemPool after destroy", sovaDeviceGetMemPool(&current, 0), cudaSuccess);
  if (current != def) expect("current reverts to default", cudaErrorUnknown, cudaSuccess);

  if (failures == 0) puts("c_api_compiles: all calls returned what they should");
  return failures == 0 ? 0 : 1;
}
