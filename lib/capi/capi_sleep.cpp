// sova C API — a pool's sleep and wake (sovaMemPoolSleep, sovaMemPoolWake,
// sova.h; sova::Pool::sleep says what they do).
//
// Arguments are checked before anything changes, each refusal saying why
// (sovaGetLastErrorMessage): the pool (NULL, an imported pool, a destroyed or
// never-made handle), the mode (any int a C caller may pass), the stream (the
// driver asked which device it is on; capture-safe).
#include "base/raw_enum.hpp"
#include "capi/capi_errors.hpp"
#include "capi/imported_pools.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"
#include "core/pool_sleep.hpp"

#include <sova/sova.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>

using namespace sova::capi;
using sova::detail::raw_enum;

namespace {

/// The entry of `pool`, or nullptr with the reason noted (cudaErrorInvalidValue).
/// Inside a ReadSection.
PoolEntry* sleep_pool(sovaMemPool_t pool) noexcept {
  if (PoolEntry* e = g_state.handles.lookup(pool)) return e;
  if (is_imported_handle(pool)) {
    note_detail(cudaErrorInvalidValue, "an imported pool cannot sleep or wake: its memory is the exporter's");
  } else {
    note_pool_handle_refused(pool);  // NULL, destroyed, or no pool handle
  }
  return nullptr;
}

/// cudaSuccess when the driver knows `stream`, else its error, with the reason
/// noted. Asks for the stream's device: allowed on a stream under capture.
cudaError_t check_stream(cudaStream_t stream) noexcept {
  int device = -1;
  const cudaError_t error = query_driver().stream_device(stream, &device);
  if (error != cudaSuccess) {
    char text[160];
    std::snprintf(text, sizeof text, "stream %p is not a stream the driver knows (%s); nothing changed",
                  static_cast<void*>(stream), cudaGetErrorName(error));
    note_detail(error, text);
  }
  return error;
}

/// Notes why `pool` refused to pin host memory beyond its budget, when that
/// is why `error` came (its refusal count passed `refusals_before`): `needs`
/// says what needed it, `outcome` what was left.
bool note_budget_refusal(sova::Pool& pool, cudaError_t error, std::uint64_t refusals_before, const char* needs,
                         const char* outcome) noexcept {
  if (error != cudaErrorMemoryAllocation) return false;
  sova::PoolStats stats;
  try {
    stats = pool.stats();
  } catch (...) {
    return false;
  }
  if (stats.sleep_budget_refusals == refusals_before) return false;
  char text[320];
  std::snprintf(text, sizeof text,
                "%s more pinned host memory than the pool's budget allows (sleepHostBudget %llu bytes, %llu held); %s",
                needs, static_cast<unsigned long long>(stats.sleep_host_budget),
                static_cast<unsigned long long>(stats.sleep_host_bytes), outcome);
  note_detail(error, text);
  return true;
}

/// The host's free memory in MiB (sysconf), for a refusal's words.
unsigned long long host_free_mib() noexcept {
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<unsigned long long>(pages) * static_cast<unsigned long long>(page) >> 20
                               : 0;
}

/// "unlimited" or "N KiB": the process's locked-memory limit (RLIMIT_MEMLOCK, `ulimit -l`).
void locked_memory_limit(char* out, std::size_t size) noexcept {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) {
    std::snprintf(out, size, "unknown");
  } else if (limit.rlim_cur == RLIM_INFINITY) {
    std::snprintf(out, size, "unlimited");
  } else {
    std::snprintf(out, size, "%llu KiB", static_cast<unsigned long long>(limit.rlim_cur) >> 10);
  }
}

/// Notes which limit refused the backup's host memory, when a refused pin
/// is why `error` came (Pool::sleep_pin_refusal): `outcome` says what was left.
bool note_pin_refusal(sova::Pool& pool, cudaError_t error, const char* outcome) noexcept {
  const sova::SleepPinRefusal why = pool.sleep_pin_refusal();
  if (error == cudaSuccess || why == sova::SleepPinRefusal::none) return false;
  char text[400];
  const unsigned long long free_mib = host_free_mib();
  if (why == sova::SleepPinRefusal::host_memory) {
    std::snprintf(text, sizeof text,
                  "the host refused memory for the backup (mmap: out of host memory or address space; %llu MiB "
                  "free); %s",
                  free_mib, outcome);
  } else if (why == sova::SleepPinRefusal::lock) {
    char limit[48];
    locked_memory_limit(limit, sizeof limit);
    std::snprintf(text, sizeof text,
                  "the driver refused to lock the backup's host memory (cudaHostRegister: %s): the locked-memory "
                  "limit (ulimit -l: %s) or the host's memory (%llu MiB free); %s",
                  cudaGetErrorName(error), limit, free_mib, outcome);
  } else {
    std::snprintf(text, sizeof text,
                  "cudaHostAlloc refused the backup's host memory (%s): the host's pinnable memory (%llu MiB free); "
                  "%s",
                  cudaGetErrorName(error), free_mib, outcome);
  }
  note_detail(error, text);
  return true;
}

/// The pool's budget refusals so far (0 where its statistics cannot be read).
std::uint64_t budget_refusals(sova::Pool& pool) noexcept {
  try {
    return pool.stats().sleep_budget_refusals;
  } catch (...) {
    return 0;
  }
}

/// The C++ mode of a checked sovaSleepMode value.
sova::SleepMode sleep_mode(int raw) noexcept {
  if (raw == sovaSleepBackup) return sova::SleepMode::backup;
  return raw == sovaSleepDiscard ? sova::SleepMode::discard : sova::SleepMode::discard_zeroed;
}

}  // namespace

static cudaError_t sovaMemPoolSleep_unchecked(sovaMemPool_t pool, sovaSleepMode mode, cudaStream_t stream) {
  const int raw = raw_enum(mode);
  if (raw != sovaSleepBackup && raw != sovaSleepDiscard && raw != sovaSleepDiscardZeroed) {
    char text[128];
    std::snprintf(text, sizeof text,
                  "mode %d is none of sovaSleepBackup (0), sovaSleepDiscard (1), sovaSleepDiscardZeroed (2)", raw);
    note_detail(cudaErrorInvalidValue, text);
    return cudaErrorInvalidValue;
  }
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t error = check_stream(stream); error != cudaSuccess) return error;
  // Importers map the exported pool's physical memory themselves: a sleep
  // would release it under them, and its wake would not reach them.
  if (e->exporter.load(std::memory_order_acquire) != nullptr) {
    note_detail(cudaErrorNotPermitted,
                "the pool was exported (sovaMemPoolExportToShareableHandle): its importers map its memory, "
                "which a sleep would take from under them; nothing was done");
    return cudaErrorNotPermitted;
  }
  const std::uint64_t refusals = budget_refusals(e->pool);
  const cudaError_t error = e->pool.sleep(sleep_mode(raw), stream);
  if (note_budget_refusal(e->pool, error, refusals, "the backup needs",
                          "nothing was copied or released, the pool is awake as it was")) {
    return error;
  }
  if (!e->pool.asleep() &&
      note_pin_refusal(e->pool, error, "nothing was copied or released, the pool is awake as it was")) {
    return error;
  }
  if (error != cudaSuccess) {
    note_detail(error, e->pool.asleep() ? "failed; the pool is asleep (a later sleep finishes the release)"
                                        : "failed; the pool is awake as it was");
  }
  return error;
}
cudaError_t sovaMemPoolSleep(sovaMemPool_t pool, sovaSleepMode mode, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolSleep_unchecked(pool, mode, stream));
}

static cudaError_t wake_impl(sovaMemPool_t pool, cudaStream_t stream) noexcept {
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t error = check_stream(stream); error != cudaSuccess) return error;
  const cudaError_t error = e->pool.wake(stream);
  if (error != cudaSuccess) note_detail(error, "failed; the pool is still asleep, nothing was made");
  return error;
}

cudaError_t sovaMemPoolWake(sovaMemPool_t pool, cudaStream_t stream) { return checked(__func__, wake_impl(pool, stream)); }

static cudaError_t sovaMemPoolWakeSynchronize_unchecked(sovaMemPool_t pool, cudaStream_t stream) {
  if (const cudaError_t error = wake_impl(pool, stream); error != cudaSuccess) return error;
  // Outside the read section: the wait may take as long as the restore.
  const cudaError_t error = query_driver().stream_synchronize(stream);
  if (error != cudaSuccess) note_detail(error, "the pool woke, but waiting for its stream failed");
  return error;
}
cudaError_t sovaMemPoolWakeSynchronize(sovaMemPool_t pool, cudaStream_t stream) {
  return checked(__func__, sovaMemPoolWakeSynchronize_unchecked(pool, stream));
}

static cudaError_t sovaMemPoolIsAsleep_unchecked(sovaMemPool_t pool, int* asleep) {
  if (asleep == nullptr) {
    note_detail(cudaErrorInvalidValue, "asleep is NULL");
    return cudaErrorInvalidValue;
  }
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  *asleep = e->pool.asleep() ? 1 : 0;
  return cudaSuccess;
}
cudaError_t sovaMemPoolIsAsleep(sovaMemPool_t pool, int* asleep) {
  return checked(__func__, sovaMemPoolIsAsleep_unchecked(pool, asleep));
}

static cudaError_t sovaMemPoolReleaseSleepHostMemory_unchecked(sovaMemPool_t pool) {
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const cudaError_t error = e->pool.release_sleep_host_memory();
  if (error == cudaErrorNotPermitted) note_detail(error, "the pool is asleep: its backups are in that memory");
  return error;
}
cudaError_t sovaMemPoolReleaseSleepHostMemory(sovaMemPool_t pool) {
  return checked(__func__, sovaMemPoolReleaseSleepHostMemory_unchecked(pool));
}

static cudaError_t sovaMemPoolGetSleepBackup_unchecked(sovaMemPool_t pool, const void* ptr, size_t bytes,
                                                       const void** host, size_t* bytes_there) {
  if (host == nullptr || bytes_there == nullptr) {
    note_detail(cudaErrorInvalidValue, host == nullptr ? "host is NULL" : "bytes_there is NULL");
    return cudaErrorInvalidValue;
  }
  *host = nullptr;
  *bytes_there = 0;
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  *host = e->pool.sleep_backup_at(ptr, bytes, bytes_there);
  return cudaSuccess;
}
cudaError_t sovaMemPoolGetSleepBackup(sovaMemPool_t pool, const void* ptr, size_t bytes, const void** host,
                                      size_t* bytes_there) {
  return checked(__func__, sovaMemPoolGetSleepBackup_unchecked(pool, ptr, bytes, host, bytes_there));
}

static cudaError_t sovaMemPoolReserveSleepBackup_unchecked(sovaMemPool_t pool, size_t bytes) {
  ReadSection section;
  PoolEntry* e = sleep_pool(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  const std::uint64_t refusals = budget_refusals(e->pool);
  const cudaError_t error = e->pool.reserve_sleep_backup(bytes);
  if (note_budget_refusal(e->pool, error, refusals, "that is", "nothing was pinned")) return error;
  if (error == cudaErrorMemoryAllocation && bytes >= sova::detail::kMaxSleepHostBytes) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "%llu bytes is 64 TiB or more: more pinned host memory than a pool holds for backups; "
                  "nothing was pinned",
                  static_cast<unsigned long long>(bytes));
    note_detail(error, text);
    return error;
  }
  if (note_pin_refusal(e->pool, error, "the memory held is as before")) return error;
  if (error != cudaSuccess) note_detail(error, "pinning host memory failed; the memory held is as before");
  return error;
}
cudaError_t sovaMemPoolReserveSleepBackup(sovaMemPool_t pool, size_t bytes) {
  return checked(__func__, sovaMemPoolReserveSleepBackup_unchecked(pool, bytes));
}
