// sova C API — aliases (sovaMemAliasCreate / sovaMemAliasDestroy): a second
// address for a live block (sova/alias.hpp has the coherence rules). Kept in
// a mutex-guarded map by alias address; not on a hot path.
#include "base/raw_enum.hpp"
#include "capi/capi_errors.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"

#include <sova/alias.hpp>
#include <sova/sova.h>

#include <map>
#include <memory>
#include <mutex>

namespace sova::capi {
namespace {
struct Aliases {
  std::mutex mutex;
  std::map<void*, std::unique_ptr<BlockAlias>> live;
};
Aliases& aliases() {
  static Aliases* a = new Aliases;  // leaked: aliases may outlive static destruction
  return *a;
}
}  // namespace
}  // namespace sova::capi

using namespace sova::capi;

static cudaError_t sovaMemAliasCreate_unchecked(void** alias, void* ptr, enum cudaMemAccessFlags flags) {
  if (alias == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
  // A C caller may pass any int: read it as one, and refuse what is no access
  // an alias can have before C++ looks at it as an enum (base/raw_enum.hpp).
  const int raw = sova::detail::raw_enum(flags);
  if (raw != cudaMemAccessFlagsProtRead && raw != cudaMemAccessFlagsProtReadWrite) return cudaErrorInvalidValue;
  try {
    std::unique_ptr<sova::BlockAlias> made;
    {
      ReadSection section;
      PoolEntry* e = g_state.owners.find(ptr);
      if (e == nullptr) return cudaErrorInvalidValue;
      made = std::make_unique<sova::BlockAlias>(e->pool, ptr, flags);
    }
    Aliases& a = aliases();
    std::lock_guard lock(a.mutex);
    void* address = made->data();
    a.live.emplace(address, std::move(made));
    *alias = address;
  } catch (...) {
    return error_from_current_exception();
  }
  return cudaSuccess;
}
cudaError_t sovaMemAliasCreate(void** alias, void* ptr, enum cudaMemAccessFlags flags) {
  return checked(__func__, sovaMemAliasCreate_unchecked(alias, ptr, flags));
}

static cudaError_t sovaMemAliasDestroy_unchecked(void* alias) {
  std::unique_ptr<sova::BlockAlias> gone;
  {
    Aliases& a = aliases();
    std::lock_guard lock(a.mutex);
    auto it = a.live.find(alias);
    if (it == a.live.end()) return cudaErrorInvalidValue;
    gone = std::move(it->second);
    a.live.erase(it);
  }
  return cudaSuccess;  // `gone` synchronizes and unmaps outside the mutex
}
cudaError_t sovaMemAliasDestroy(void* alias) { return checked(__func__, sovaMemAliasDestroy_unchecked(alias)); }
