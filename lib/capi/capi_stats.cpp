// sova C API — sovaMemPoolGetStats: sova::PoolStats as a C struct that can
// grow (include/sova/sova.h says the size rule). A new PoolStats counter is
// added to sova.h, to stats_fields.hpp and to python/sova/_capi.py
// (stats_fields.hpp says how the three are checked).
#include "capi/capi_errors.hpp"
#include "capi/pool_handle_refusal.hpp"
#include "capi/pool_lifetime.hpp"
#include "capi/read_section.hpp"
#include "capi/stats_fields.hpp"

#include <sova/sova.h>

#include <cstddef>
#include <cstring>

using namespace sova::capi;

namespace {

sovaMemPoolStats to_c(const sova::PoolStats& s) noexcept {
  sovaMemPoolStats out;
  std::memset(&out, 0, sizeof out);
  out.structSize = sizeof out;
#define SOVA_COPY_TO_C(c_field, cpp_field) out.c_field = s.cpp_field;
  SOVA_POOL_STATS_FIELDS(SOVA_COPY_TO_C)
#undef SOVA_COPY_TO_C
  return out;
}

}  // namespace

static cudaError_t sovaMemPoolGetStats_unchecked(sovaMemPool_t pool, sovaMemPoolStats* stats) {
  if (stats == nullptr) return cudaErrorInvalidValue;
  const std::size_t caller_size = stats->structSize;
  // The smallest struct worth filling holds structSize and reservedCurrent.
  if (caller_size < offsetof(sovaMemPoolStats, reservedHigh)) return cudaErrorInvalidValue;
  ReadSection section;
  PoolEntry* e = g_state.handles.lookup(pool);
  if (e == nullptr) return note_pool_handle_refused(pool);
  sovaMemPoolStats full;
  try {
    full = to_c(e->pool.stats());
  } catch (...) {
    return error_from_current_exception();
  }
  // Whole fields only, and never structSize itself: the caller's value stays.
  std::size_t n = caller_size < sizeof full ? caller_size : sizeof full;
  n -= (n - offsetof(sovaMemPoolStats, reservedCurrent)) % sizeof(std::uint64_t);
  std::memcpy(reinterpret_cast<char*>(stats) + offsetof(sovaMemPoolStats, reservedCurrent),
              reinterpret_cast<const char*>(&full) + offsetof(sovaMemPoolStats, reservedCurrent),
              n - offsetof(sovaMemPoolStats, reservedCurrent));
  return cudaSuccess;
}
cudaError_t sovaMemPoolGetStats(sovaMemPool_t pool, sovaMemPoolStats* stats) {
  return checked(__func__, sovaMemPoolGetStats_unchecked(pool, stats));
}
