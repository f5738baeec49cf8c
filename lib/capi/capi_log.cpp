// sova C API — the allocation log's entry points (sova.h; the log itself is
// lib/core/alloc_log.*, hooked into sova::Pool so that it sees every pool).
#include "capi/last_error.hpp"
#include "core/alloc_log.hpp"

#include <sova/sova.h>

using sova::capi::checked;

cudaError_t sovaLogStart(const char* path) { return checked(__func__, sova::detail::log_start(path)); }

cudaError_t sovaLogStop(void) { return checked(__func__, sova::detail::log_stop()); }
