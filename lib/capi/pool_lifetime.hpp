// sova C API — the process-wide state and the life of a pool: creation (the
// first one locks the process driver), destruction, deferred finalization.
//
// Life of a pool created by sovaMemPoolCreate:
//   published  in the handle table and the pointer registry.
//   destroyed  sovaMemPoolDestroy retired the handle (it fails at once) and
//              made the device's default pool current again if this one was;
//              still in the pointer registry while blocks are live, so
//              sovaFreeAsync finds it.
//   finalized  the last live block is freed (or none was live at destroy):
//              unlisted, then after synchronize_readers() the Pool is deleted
//              (its destructor waits for the pool's device, and for every other
//              device its blocks were freed on, and releases all memory).
//              Blocks that CUDA graphs hold count as live until the graphs
//              are released and the release collected; a pool left with only
//              those is finalized by the first sovaDeviceGraphMemTrim of its
//              device after the release (finalize_released_pools), or by a
//              free of one of its blocks.
// Default pools stay published for the life of the process.
//
// Locking: one mutex (`mutex`) guards every change to the tables; it is never
// held while waiting in synchronize_readers(), and never taken on the fast path.
#pragma once

#include "capi/device_pools.hpp"
#include "capi/handle_table.hpp"
#include "capi/pointer_registry.hpp"
#include "capi/pool_entry.hpp"

#include <sova/driver.hpp>

#include <atomic>
#include <mutex>

namespace sova::capi {

struct CapiState {
  std::mutex mutex;
  HandleTable handles;
  PointerRegistry owners;
  DevicePools devices;
  /// The driver every C API pool uses; null until the first pool is created,
  /// fixed afterwards (set_process_driver refuses changes from then on).
  std::atomic<Driver*> driver{nullptr};
  /// The driver has one device (set before `driver` is published): every
  /// stream is then device 0's, and sovaMallocAsync skips asking the driver
  /// for the stream's device (cuStreamGetDevice: 55 ns of a 258 ns pair on
  /// the H100's host).
  std::atomic<bool> one_device{false};
};

/// Constant-initialized and never torn down: default pools and pools with
/// live blocks at exit are deliberately leaked, since the drivers they would
/// call into may already be destroyed by then.
extern constinit CapiState g_state;

/// The pools' driver. The first call locks the process driver (set_process_driver
/// fails from then on) and enables the cheap read-section fence.
Driver* pools_driver() noexcept;

/// The driver to validate arguments against: the pools' driver once one exists,
/// else process_driver() (which may still be changed until the first pool).
Driver& query_driver() noexcept;

/// Checks that `device` is an ordinal of query_driver(): cudaSuccess, or
/// `bad_device_error` when out of range, or the driver's own failure.
cudaError_t check_device(int device, cudaError_t bad_device_error) noexcept;

/// Creates a pool on pools_driver() and publishes it in the handle table and
/// the pointer registry. Returns the Pool constructor's error;
/// cudaErrorMemoryAllocation when out of host memory or table slots;
/// cudaErrorNotSupported for a device beyond DevicePools::kMaxDevices.
/// The device must be in range (check_device). Callers keep it outside
/// ReadSections (allowed, but it may take long).
cudaError_t create_pool(PoolOptions options, bool is_default, PoolEntry** out) noexcept;

/// The device's default pool, created on first use and then installed in the
/// device tables (and made current unless a pool already is). The device
/// must be in range. The entry returned is never deleted.
cudaError_t ensure_default_pool(int device, PoolEntry** out) noexcept;

/// sovaMemPoolDestroy. Not inside a ReadSection (it waits for readers).
cudaError_t destroy_pool(sovaMemPool_t handle) noexcept;

/// Called inside a ReadSection after a successful free into a pool marked
/// destroyed. True when the caller has claimed the pool's finalization: it must
/// then leave its section and call finalize_pool(e).
bool claim_finalization(PoolEntry* e) noexcept;

/// Unlists a claimed pool, waits for readers and deletes it. Not inside a
/// ReadSection.
void finalize_pool(PoolEntry* e) noexcept;

/// Finalizes the destroyed pools of `device` that have no live block left
/// once the releases of their graphs are collected (a destroyed pool whose
/// last blocks were graph memory has no free left to finalize it). Not
/// inside a ReadSection.
void finalize_released_pools(int device) noexcept;

}  // namespace sova::capi
