// sova C API — what CUDA graphs hold (docs/graphs.md): the counterparts of
// cudaDeviceGetGraphMemAttribute, cudaDeviceSetGraphMemAttribute and
// cudaDeviceGraphMemTrim, per pool and per device. Allocation and free under
// capture need nothing here: sovaMallocAsync and sovaFreeAsync reach the
// pool, which serves them (lib/core/graph_memory.hpp).
//
// A device's figures cover the pools sovaMallocAsync allocates from on it:
// its default pool and its current pool. Graph memory taken through
// sovaMallocFromPoolAsync from another pool is that pool's (the per-pool
// calls).
#include "base/raw_enum.hpp"
#include "capi/capi_errors.hpp"
#include "capi/last_error.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/sova.h>

#include <cstdint>

using namespace sova::capi;

namespace {

/// `attr`: the raw value of a cudaGraphMemAttributeType (a C caller may pass
/// any int: base/raw_enum.hpp).
cudaError_t read_attribute(const sova::GraphMemoryStats& s, int attr, std::uint64_t* out) {
  switch (attr) {
    // sova's graph memory is pool memory: what graphs use is what is reserved for them.
    case cudaGraphMemAttrUsedMemCurrent:
    case cudaGraphMemAttrReservedMemCurrent: *out = s.held_bytes; return cudaSuccess;
    case cudaGraphMemAttrUsedMemHigh:
    case cudaGraphMemAttrReservedMemHigh: *out = s.held_bytes_high; return cudaSuccess;
    default: return cudaErrorInvalidValue;
  }
}

bool is_high(int attr) { return attr == cudaGraphMemAttrUsedMemHigh || attr == cudaGraphMemAttrReservedMemHigh; }

/// Calls f(pool) for the device's default and current pools (once if they
/// are the same). Inside a ReadSection. cudaErrorInvalidDevice for a device
/// out of range; no pool yet: nothing is called.
template <class F>
cudaError_t for_device_pools(int device, F f) {
  if (const cudaError_t err = check_device(device, cudaErrorInvalidDevice); err != cudaSuccess) return err;
  ReadSection section;
  PoolEntry* pools[2] = {g_state.devices.default_pool(device), g_state.devices.current(device)};
  if (pools[1] == pools[0]) pools[1] = nullptr;
  for (PoolEntry* e : pools) {
    if (e == nullptr) continue;
    if (const cudaError_t err = f(e->pool); err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

static cudaError_t sovaMemPoolGetGraphMemAttribute_unchecked(sovaMemPool_t pool, cudaGraphMemAttributeType attr,
                                                             void* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  try {
    std::uint64_t v = 0;
    const int raw = sova::detail::raw_enum(attr);
    if (const cudaError_t err = read_attribute(e->pool.graph_memory_stats(), raw, &v); err != cudaSuccess) return err;
    *static_cast<std::uint64_t*>(value) = v;
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolGetGraphMemAttribute(sovaMemPool_t pool, enum cudaGraphMemAttributeType attr, void* value) {
  return checked(__func__, sovaMemPoolGetGraphMemAttribute_unchecked(pool, attr, value));
}

static cudaError_t sovaMemPoolGraphMemTrim_unchecked(sovaMemPool_t pool) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  try {
    e->pool.trim_graph_memory();
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolGraphMemTrim(sovaMemPool_t pool) {
  return checked(__func__, sovaMemPoolGraphMemTrim_unchecked(pool));
}

/// Calls f(pool) for the pool behind the handle, inside a ReadSection;
/// cudaErrorInvalidValue for a handle that names no pool.
template <class F>
static cudaError_t with_pool(sovaMemPool_t handle, F f) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(handle);
  if (e == nullptr) return cudaErrorInvalidValue;
  return f(e->pool);
}

cudaError_t sovaMemPoolShareGroupCreate(sovaMemPool_t pool, uint64_t* group) {
  return checked(__func__, with_pool(pool, [&](sova::Pool& p) { return p.create_graph_share_group(group); }));
}

cudaError_t sovaMemPoolShareGroupCaptureNext(sovaMemPool_t pool, uint64_t group, cudaStream_t stream) {
  return checked(__func__,
                 with_pool(pool, [&](sova::Pool& p) { return p.capture_into_share_group(stream, group); }));
}

cudaError_t sovaMemPoolShareGroupDestroy(sovaMemPool_t pool, uint64_t group) {
  return checked(__func__, with_pool(pool, [&](sova::Pool& p) { return p.destroy_graph_share_group(group); }));
}

static cudaError_t sovaMemPoolGetGraphHoldings_unchecked(sovaMemPool_t pool, sovaGraphHolding* holdings,
                                                         size_t capacity, size_t* count) {
  if (count == nullptr || (holdings == nullptr && capacity != 0)) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return cudaErrorInvalidValue;
  try {
    const sova::GraphMemorySnapshot snapshot = e->pool.graph_memory_snapshot();
    for (std::size_t i = 0; i < snapshot.size() && i < capacity; ++i) {
      const sova::GraphHolding& h = snapshot[i];
      sovaGraphHolding out{};
      out.captureId = h.capture_id;
      out.heldBytes = h.held_bytes;
      out.heldBlocks = h.held_blocks;
      out.outputBytes = h.output_bytes;
      out.outputBlocks = h.output_blocks;
      out.capturing = h.capturing ? 1 : 0;
      holdings[i] = out;
    }
    *count = snapshot.size();
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolGetGraphHoldings(sovaMemPool_t pool, sovaGraphHolding* holdings, size_t capacity,
                                        size_t* count) {
  return checked(__func__, sovaMemPoolGetGraphHoldings_unchecked(pool, holdings, capacity, count));
}

static cudaError_t sovaDeviceGetGraphMemAttribute_unchecked(int device, cudaGraphMemAttributeType attr, void* value) {
  if (value == nullptr) return cudaErrorInvalidValue;
  const int raw = sova::detail::raw_enum(attr);
  std::uint64_t probe = 0;
  if (const cudaError_t err = read_attribute(sova::GraphMemoryStats{}, raw, &probe); err != cudaSuccess) return err;
  std::uint64_t sum = 0;
  const cudaError_t err = for_device_pools(device, [&](sova::Pool& pool) {
    std::uint64_t v = 0;
    const cudaError_t e = read_attribute(pool.graph_memory_stats(), raw, &v);
    sum += v;  // a sum of high-water marks: an upper bound of the device's
    return e;
  });
  if (err != cudaSuccess) return err;
  *static_cast<std::uint64_t*>(value) = sum;
  return cudaSuccess;
}
cudaError_t sovaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  try {
    return checked(__func__, sovaDeviceGetGraphMemAttribute_unchecked(device, attr, value));
  } catch (...) {
    return checked(__func__, error_from_current_exception());
  }
}

static cudaError_t sovaDeviceSetGraphMemAttribute_unchecked(int device, cudaGraphMemAttributeType attr, void* value) {
  // As the runtime: only the high-water marks can be set, and only to 0 (a reset to the current value).
  if (value == nullptr || !is_high(sova::detail::raw_enum(attr)) || *static_cast<const std::uint64_t*>(value) != 0)
    return cudaErrorInvalidValue;
  return for_device_pools(device, [](sova::Pool& pool) {
    pool.reset_graph_memory_high();
    return cudaSuccess;
  });
}
cudaError_t sovaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void* value) {
  return checked(__func__, sovaDeviceSetGraphMemAttribute_unchecked(device, attr, value));
}

static cudaError_t sovaDeviceGraphMemTrim_unchecked(int device) {
  const cudaError_t err = for_device_pools(device, [](sova::Pool& pool) {
    pool.trim_graph_memory();
    return cudaSuccess;
  });
  // Destroyed pools that only graphs kept: released graphs' memory back, and
  // such a pool with nothing left live is finalized (pool_lifetime.hpp).
  if (err == cudaSuccess) finalize_released_pools(device);
  return err;
}
cudaError_t sovaDeviceGraphMemTrim(int device) {
  try {
    return checked(__func__, sovaDeviceGraphMemTrim_unchecked(device));
  } catch (...) {
    return checked(__func__, error_from_current_exception());
  }
}
