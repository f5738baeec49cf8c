// sova C API — the allocation log's entry points (sova.h; the log itself is
// lib/core/alloc_log.*, hooked into sova::Pool so that it sees every pool).
#include "capi/last_error.hpp"
#include "core/alloc_log.hpp"

#include <sova/sova.h>

using sova::capi::checked;

cudaError_t sovaLogStart(const char* path) {
  // A refusal names what was wrong (no path, a log running, a file that
  // cannot be opened) and what to do, in the thread's last error message.
  char why[768] = {};
  const cudaError_t err = sova::detail::log_start(path, why, sizeof why);
  if (err != cudaSuccess && why[0] != '\0') sova::capi::note_detail(err, why);
  return checked(__func__, err);
}

cudaError_t sovaLogStop(void) { return checked(__func__, sova::detail::log_stop()); }
