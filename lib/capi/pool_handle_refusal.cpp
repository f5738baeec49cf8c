// sova C API — words for a refused pool handle (pool_handle_refusal.hpp).
#include "capi/pool_handle_refusal.hpp"

#include "capi/imported_pools.hpp"
#include "capi/last_error.hpp"
#include "capi/pool_lifetime.hpp"

#include <cstdio>

namespace sova::capi {

cudaError_t note_pool_handle_refused(sovaMemPool_t handle) noexcept {
  char text[300];
  if (handle == nullptr) {
    std::snprintf(text, sizeof text,
                  "pool is NULL; pass a pool from sovaMemPoolCreate, or sovaDeviceGetDefaultMemPool's");
  } else {
    const bool issued = g_state.handles.issued(handle);  // lock-free: callers may hold the lifetime mutex
    if (is_imported_handle(handle)) {
      std::snprintf(text, sizeof text,
                    "pool %p is imported from another process (sovaMemPoolImportFromShareableHandle); this call "
                    "takes only pools created in this process",
                    static_cast<void*>(handle));
    } else if (issued) {
      std::snprintf(text, sizeof text,
                    "pool %p is not a live sova pool: it was destroyed (sovaMemPoolDestroy) and takes no more "
                    "calls; use a live pool, or create one (sovaMemPoolCreate)",
                    static_cast<void*>(handle));
    } else {
      std::snprintf(text, sizeof text,
                    "pool %p is not a live sova pool: no sova call made that handle (a cudaMemPool_t is not "
                    "one); pass a pool from sovaMemPoolCreate, or sovaDeviceGetDefaultMemPool's",
                    static_cast<void*>(handle));
    }
  }
  note_detail(cudaErrorInvalidValue, text);
  return cudaErrorInvalidValue;
}

}  // namespace sova::capi
