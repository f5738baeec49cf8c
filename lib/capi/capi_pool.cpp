// sova C API — pools: create, destroy, attributes, trim, access.
// Error codes follow docs/runtime-errors.md; Pool returns the runtime's
// codes for everything it validates itself (attributes, access descriptors).
#include "base/raw_enum.hpp"
#include "capi/capi_errors.hpp"
#include "capi/imported_pools.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/sova.h>

namespace sova::capi {
namespace {

using sova::detail::raw_enum;  // C enum fields and arguments are read as ints

/// cudaSuccess when `props` asks for something sova can make; else the
/// runtime-style error. Invalid values come before unsupported ones, so a
/// caller learns first what no version of sova would accept.
cudaError_t check_props(const sovaMemPoolProps& props) noexcept {
  for (const unsigned char byte : props.reserved)
    if (byte != 0) return cudaErrorInvalidValue;
  for (const unsigned char byte : props.reservedPad)
    if (byte != 0) return cudaErrorInvalidValue;
  constexpr unsigned kKnownFlags = sovaMemPoolNoStreamChecks | sovaMemPoolNoRemap | sovaMemPoolThoroughRemap |
                                   sovaMemPoolCompressible | sovaMemPoolHostMemory | sovaMemPoolSleepPinAhead;
  if ((props.flags & ~kKnownFlags) != 0) return cudaErrorInvalidValue;
  // No remapping and thorough remapping contradict each other.
  constexpr unsigned kRemapFlags = sovaMemPoolNoRemap | sovaMemPoolThoroughRemap;
  if ((props.flags & kRemapFlags) == kRemapFlags) return cudaErrorInvalidValue;
  switch (raw_enum(props.policy)) {
    case sovaPolicyDefault:
    case sovaPolicyBestFit:
    case sovaPolicySizeClass:
    case sovaPolicyBuddy: break;
    default: return cudaErrorInvalidValue;
  }
  if (const cudaError_t err = check_device(props.device, cudaErrorInvalidValue); err != cudaSuccess) return err;
  constexpr int kKnownHandles = cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric |
                                cudaMemHandleTypeWin32 | cudaMemHandleTypeWin32Kmt;
  if ((raw_enum(props.handleTypes) & ~kKnownHandles) != 0) return cudaErrorInvalidValue;
  if ((raw_enum(props.handleTypes) & (cudaMemHandleTypeWin32 | cudaMemHandleTypeWin32Kmt)) != 0)
    return cudaErrorNotSupported;  // Windows handles on Linux
  if (props.hostNumaNode < 0) return cudaErrorInvalidValue;
  if (props.hostNumaNode != 0 && (props.flags & sovaMemPoolHostMemory) == 0) return cudaErrorInvalidValue;
  // What the device supports (handle types, compression, host memory) the
  // Pool constructor checks: cudaErrorNotSupported from there.
  return cudaSuccess;
}

}  // namespace
}  // namespace sova::capi

using namespace sova::capi;

static cudaError_t sovaMemPoolCreate_unchecked(sovaMemPool_t* pool, const sovaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t err = check_props(*props); err != cudaSuccess) return err;
  sova::PoolOptions options;
  options.device = props->device;
  options.max_size = props->maxSize;
  switch (props->policy) {
    case sovaPolicySizeClass: options.policy = sova::Policy::size_classes; break;
    case sovaPolicyBuddy: options.policy = sova::Policy::buddy; break;
    case sovaPolicyBestFit: options.policy = sova::Policy::best_fit; break;
    default: options.policy = sova::Policy::default_policy; break;
  }
  options.check_streams = (props->flags & sovaMemPoolNoStreamChecks) == 0;
  options.remap = (props->flags & sovaMemPoolNoRemap) == 0;
  if ((props->flags & sovaMemPoolThoroughRemap) != 0) options.remap_effort = sova::RemapEffort::thorough;
  options.handle_types = static_cast<unsigned>(raw_enum(props->handleTypes));
  options.compressible = (props->flags & sovaMemPoolCompressible) != 0;
  if ((props->flags & sovaMemPoolHostMemory) != 0) options.host_numa_node = props->hostNumaNode;
  options.sleep_host_budget = props->sleepHostBudget;
  options.sleep_pin_ahead = (props->flags & sovaMemPoolSleepPinAhead) != 0;
  PoolEntry* e = nullptr;
  if (const cudaError_t err = create_pool(options, false, &e); err != cudaSuccess) return err;
  // No other thread can know the handle yet, so `e` cannot be destroyed here.
  *pool = HandleTable::to_handle(e);
  return cudaSuccess;
}
cudaError_t sovaMemPoolCreate(sovaMemPool_t* pool, const sovaMemPoolProps* props) {
  return checked(__func__, sovaMemPoolCreate_unchecked(pool, props));
}

static cudaError_t sovaMemPoolDestroy_unchecked(sovaMemPool_t pool) {
  if (is_imported_handle(pool)) return destroy_imported(pool);
  return destroy_pool(pool);
}
cudaError_t sovaMemPoolDestroy(sovaMemPool_t pool) { return checked(__func__, sovaMemPoolDestroy_unchecked(pool)); }

static cudaError_t sovaMemPoolSetAttribute_unchecked(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  if (value == nullptr) return cudaErrorInvalidValue;
  // Checked as an int before the enum is passed on (base/raw_enum.hpp).
  if (!sova::detail::known_pool_attr(raw_enum(attr))) return cudaErrorInvalidValue;
  return e->pool.set_attribute(attr, value);
}
cudaError_t sovaMemPoolSetAttribute(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value) {
  return checked(__func__, sovaMemPoolSetAttribute_unchecked(pool, attr, value));
}

static cudaError_t sovaMemPoolGetAttribute_unchecked(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  if (value == nullptr) return cudaErrorInvalidValue;
  // Checked as an int before the enum is passed on (base/raw_enum.hpp).
  if (!sova::detail::known_pool_attr(raw_enum(attr))) return cudaErrorInvalidValue;
  return e->pool.get_attribute(attr, value);
}
cudaError_t sovaMemPoolGetAttribute(sovaMemPool_t pool, enum cudaMemPoolAttr attr, void* value) {
  return checked(__func__, sovaMemPoolGetAttribute_unchecked(pool, attr, value));
}

static cudaError_t sovaMemPoolTrimTo_unchecked(sovaMemPool_t pool, size_t minBytesToKeep) {
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  try {
    e->pool.trim_to(minBytesToKeep);
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemPoolTrimTo(sovaMemPool_t pool, size_t minBytesToKeep) {
  return checked(__func__, sovaMemPoolTrimTo_unchecked(pool, minBytesToKeep));
}

static cudaError_t sovaMemPoolSetAccess_unchecked(sovaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count) {
  if (is_imported_handle(pool)) return set_imported_access(pool, descs, count);
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  if (descs == nullptr && count != 0) return cudaErrorInvalidValue;
  return e->pool.set_access(descs, count);
}
cudaError_t sovaMemPoolSetAccess(sovaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count) {
  return checked(__func__, sovaMemPoolSetAccess_unchecked(pool, descs, count));
}

static cudaError_t sovaMemPoolGetAccess_unchecked(enum cudaMemAccessFlags* flags, sovaMemPool_t pool,
                                                  cudaMemLocation* location) {
  if (is_imported_handle(pool)) return get_imported_access(flags, pool, location);
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  if (flags == nullptr || location == nullptr) return cudaErrorInvalidValue;
  return e->pool.get_access(flags, location);
}
cudaError_t sovaMemPoolGetAccess(enum cudaMemAccessFlags* flags, sovaMemPool_t pool, cudaMemLocation* location) {
  return checked(__func__, sovaMemPoolGetAccess_unchecked(flags, pool, location));
}
