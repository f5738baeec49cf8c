// sova C API — what a refused pool handle was, in words, for the thread's
// last error message (sovaGetLastErrorMessage): NULL, a pool destroyed
// (sovaMemPoolDestroy), an imported pool where only this process's are
// taken, or a value that is no sova pool handle (a cudaMemPool_t, garbage),
// each with what to do instead.
//
// Called where an entry point's handle lookup failed (HandleTable::lookup
// returned nullptr), before it returns cudaErrorInvalidValue: the detail is
// noted for that code (note_detail), and the entry point's checked() or
// record_error() makes it the message. Cold; takes no lock, so it may be
// called with the lifetime mutex held (sovaDeviceSetMemPool does).
#pragma once

#include <sova/sova.h>

namespace sova::capi {

/// Notes why `handle` names no live pool, for cudaErrorInvalidValue.
/// Returns cudaErrorInvalidValue, for `return note_pool_handle_refused(pool);`.
[[gnu::cold, gnu::noinline]] cudaError_t note_pool_handle_refused(sovaMemPool_t handle) noexcept;

}  // namespace sova::capi
