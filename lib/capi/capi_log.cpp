// sova C API — the allocation log's entry points (sova.h; the log itself is
// lib/core/alloc_log.*, hooked into sova::Pool so that it sees every pool).
#include "core/alloc_log.hpp"

#include <sova/sova.h>

cudaError_t sovaLogStart(const char* path) { return sova::detail::log_start(path); }

cudaError_t sovaLogStop(void) { return sova::detail::log_stop(); }
