// sova C API — pool creation, destruction and deferred finalization
// (see pool_lifetime.hpp for the states and the locking rules).
#include "capi/pool_lifetime.hpp"

#include <cstdlib>
#include <cstring>

#include "capi/capi_errors.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/read_section.hpp"
#include "core/alloc_log.hpp"
#include "driver/process_driver.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

namespace sova::capi {

// Constant-initialized (no start-up order issue: the C API works from other
// static constructors) and trivially destructible (nothing runs at exit, so
// the C API also works from static destructors).
constinit CapiState g_state;
static_assert(std::is_trivially_destructible_v<CapiState>, "the C API state must survive static destruction");

Driver* pools_driver() noexcept {
  if (Driver* d = g_state.driver.load(std::memory_order_acquire)) return d;
  std::lock_guard lock(g_state.mutex);
  Driver* d = g_state.driver.load(std::memory_order_relaxed);
  if (d == nullptr) {
    enable_asymmetric_fence();  // before any pool makes a read section matter
    d = &sova::detail::lock_process_driver();
    int count = 0;
    g_state.one_device.store(d->device_count(&count) == cudaSuccess && count == 1, std::memory_order_relaxed);
    g_state.driver.store(d, std::memory_order_release);
    // The C API's first pool: SOVA_LOG, if set, starts the allocation log.
    sova::detail::log_start_from_environment();
  }
  return d;
}

namespace {

/// Lifetime mutex held. Publishes `e` everywhere but the device tables;
/// false (nothing published) when a table is full.
bool publish_locked(PoolEntry* e) noexcept {
  if (!g_state.handles.publish(e)) return false;
  if (!g_state.owners.add(e)) {
    g_state.handles.retire(e);
    return false;
  }
  return true;
}

/// Blocks still handed out; on any failure to tell, "some" (leaking a
/// destroyed pool beats deleting one with live blocks).
std::uint64_t live_blocks(const PoolEntry* e) noexcept {
  try {
    return e->pool.stats().live_blocks;
  } catch (...) {
    return 1;
  }
}

}  // namespace

Driver& query_driver() noexcept {
  if (Driver* d = g_state.driver.load(std::memory_order_acquire)) return *d;
  return process_driver();
}

cudaError_t check_device(int device, cudaError_t bad_device_error) noexcept {
  int count = 0;
  if (const cudaError_t err = query_driver().device_count(&count); err != cudaSuccess) return err;
  if (device >= 0 && device < count) return cudaSuccess;
  char text[96];
  std::snprintf(text, sizeof text, "device %d does not exist (%d device%s)", device, count, count == 1 ? "" : "s");
  note_detail(bad_device_error, text);
  return bad_device_error;
}

cudaError_t create_pool(PoolOptions options, bool is_default, PoolEntry** out) noexcept {
  if (!DevicePools::in_table(options.device)) return cudaErrorNotSupported;
  options.driver = pools_driver();
  PoolEntry* e = nullptr;
  try {
    // Built outside the mutex: reserving VA may take a while.
    e = new PoolEntry(options, is_default);
  } catch (...) {
    return error_from_current_exception();
  }
  {
    std::lock_guard lock(g_state.mutex);
    if (publish_locked(e)) {
      *out = e;
      return cudaSuccess;
    }
  }
  delete e;  // never published: no reader can hold it
  return cudaErrorMemoryAllocation;
}

cudaError_t ensure_default_pool(int device, PoolEntry** out) noexcept {
  if (PoolEntry* e = g_state.devices.default_pool(device)) {
    *out = e;
    return cudaSuccess;
  }
  if (!DevicePools::in_table(device)) return cudaErrorNotSupported;
  // Serialized per process so that two threads never both build one; the
  // first use of a device is rare enough that the wait does not matter.
  static std::mutex creation_mutex;
  std::lock_guard creating(creation_mutex);
  if (PoolEntry* e = g_state.devices.default_pool(device)) {
    *out = e;
    return cudaSuccess;
  }
  PoolOptions options;
  options.device = device;
  // A program that only renamed its calls can still choose the fast path.
  const char* checks = std::getenv("SOVA_STREAM_CHECKS");
  options.check_streams = checks == nullptr || std::strcmp(checks, "0") != 0;
  PoolEntry* e = nullptr;
  if (const cudaError_t err = create_pool(options, true, &e); err != cudaSuccess) return err;
  {
    std::lock_guard lock(g_state.mutex);
    g_state.devices.set_default(device, e);
  }
  *out = e;
  return cudaSuccess;
}

cudaError_t destroy_pool(sovaMemPool_t handle) noexcept {
  PoolEntry* e = nullptr;
  {
    std::lock_guard lock(g_state.mutex);
    e = g_state.handles.lookup(handle);
    if (e == nullptr) return note_pool_handle_refused(handle);
    if (e->is_default) {
      note_detail(cudaErrorInvalidValue,
                  "a device's default pool cannot be destroyed (it lives as long as the process); destroy only "
                  "pools from sovaMemPoolCreate");
      return cudaErrorInvalidValue;
    }
    g_state.handles.retire(e);
    g_state.devices.revert_current(e);
    e->destroy_pending = true;  // frees must leave the "any left?" check to us
    e->destroyed.store(true, std::memory_order_release);
  }
  // Every section that found the pool through its handle or as a current pool
  // has ended, so no allocation from it is still in flight, and every free
  // that did not see `destroyed` has finished. live_blocks is now final but
  // for frees, and those see `destroyed` and call claim_finalization.
  synchronize_readers();
  // Its graph share groups cannot be named any more: destroyed, so that their
  // memory comes back once their member graphs are released.
  e->pool.destroy_graph_share_groups();
  bool claimed = false;
  {
    std::lock_guard lock(g_state.mutex);
    e->destroy_pending = false;
    if (!e->finalizing && live_blocks(e) == 0) claimed = e->finalizing = true;
  }
  if (claimed) finalize_pool(e);
  return cudaSuccess;
}

namespace {

/// claim_finalization with the lifetime mutex held.
bool claim_locked(PoolEntry* e) noexcept {
  // The mutex orders the checks: of the frees racing for the last blocks, the
  // one that checks last sees every other's free, hence zero. live_blocks
  // reads the pool's statistics, which collect released graphs first.
  if (e->finalizing || e->destroy_pending || live_blocks(e) != 0) return false;
  e->finalizing = true;
  return true;
}

}  // namespace

bool claim_finalization(PoolEntry* e) noexcept {
  std::lock_guard lock(g_state.mutex);
  return claim_locked(e);
}

void finalize_released_pools(int device) noexcept {
  std::vector<PoolEntry*> claimed;
  {
    std::lock_guard lock(g_state.mutex);
    try {
      g_state.owners.for_each_locked([&](PoolEntry* e) {
        if (e->device == device && e->destroyed.load(std::memory_order_relaxed) && claim_locked(e)) {
          try {
            claimed.push_back(e);
          } catch (...) {
            e->finalizing = false;  // no room to list it: a later call finalizes it
          }
        }
      });
    } catch (...) {
    }
  }
  for (PoolEntry* e : claimed) finalize_pool(e);
}

void finalize_pool(PoolEntry* e) noexcept {
  {
    std::lock_guard lock(g_state.mutex);
    g_state.owners.remove(e);
  }
  synchronize_readers();
  // ~Pool waits for the pool's device and for every device its blocks were
  // freed on (a last sovaFreeAsync on stream 0 of another current device
  // included), then releases VA and memory.
  delete e;
}

}  // namespace sova::capi
