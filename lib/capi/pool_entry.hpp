// sova C API — what the C API keeps per pool.
#pragma once

#include <sova/ipc.hpp>
#include <sova/pool.hpp>

#include <atomic>
#include <cstdint>

namespace sova::capi {

/// One pool as the C API sees it. Reached lock-free (inside a ReadSection)
/// through the handle table, the device tables and the pointer registry;
/// deleted only by finalize() in pool_lifetime.cpp, after every table has
/// dropped it and synchronize_readers() returned.
struct PoolEntry {
  explicit PoolEntry(const PoolOptions& options, bool default_pool)
      : pool(options), device(options.device), is_default(default_pool) {}
  /// The exporter goes first: its thread reads the pool.
  ~PoolEntry() { delete exporter.load(std::memory_order_acquire); }
  PoolEntry(const PoolEntry&) = delete;
  PoolEntry& operator=(const PoolEntry&) = delete;

  /// First member: the fast path reaches it with no offset arithmetic.
  Pool pool;
  const int device;
  /// A device's default pool: never destroyed (sovaMemPoolDestroy refuses it).
  const bool is_default;
  /// The sovaMemPool_t value, unique for the life of the process
  /// (handle_table.hpp). Written once before the entry is published, never
  /// changed: retiring a handle clears its table slot instead.
  std::uintptr_t handle = 0;
  std::uint32_t handle_slot = 0;  ///< guarded by the lifetime mutex
  std::uint32_t owner_slot = 0;   ///< guarded by the lifetime mutex

  /// Set (under the lifetime mutex) when sovaMemPoolDestroy retires the
  /// handle. The free path reads it after each free: a destroyed pool is
  /// finalized by the free that returns its last block.
  std::atomic<bool> destroyed{false};
  /// Guarded by the lifetime mutex: sovaMemPoolDestroy has not yet finished
  /// its own "any blocks left?" check, so frees must not finalize yet.
  bool destroy_pending = false;
  /// Guarded by the lifetime mutex: one thread has claimed the finalization.
  bool finalizing = false;
  /// IPC (capi_ipc.cpp): made by the first export, under the lifetime mutex;
  /// sovaFreeAsync tells it of each free so that export data goes stale.
  std::atomic<PoolExporter*> exporter{nullptr};
};

}  // namespace sova::capi
