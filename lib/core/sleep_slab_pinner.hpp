// pin_slabs: pinned host memory for a sleep's backup, taken on several host
// threads at once.
//
// Why: pinning (cudaHostAlloc) runs at 2-3 GiB/s, far below the link (about
// 50 GiB/s): a first sleep that pins its slabs one after another runs at the
// pinning rate. Pinning on several threads, and copying into each slab as
// soon as it is pinned, overlaps pinning with pinning and pinning with
// copying. Measured on an H200 host, the driver's pinning did not scale with
// threads (the first sleep stayed at 2.2-2.4 GiB/s, docs/benchmarks.md): only
// the copies' overlap remains there; pinning ahead (Pool::reserve_sleep_backup,
// or PoolOptions::sleep_pin_ahead's thread, sleep_pin_ahead.hpp) is what keeps
// the cost off a step.
#pragma once

#include <sova/driver.hpp>

#include <cstddef>
#include <functional>
#include <vector>

namespace sova::detail {

/// At most this many threads pin at once: the bound on the threads one
/// sleep starts (each pins a slab at a time).
inline constexpr std::size_t kMaxPinThreads = 8;

/// Pins one slab of each of `sizes` through `driver.host_alloc_on(device)`, on up to
/// kMaxPinThreads threads (on the calling thread alone for a single slab, or
/// when no thread can be started). `pinned` is resized to sizes.size() and
/// gets each slab's pointer (nullptr for a slab not pinned).
/// `on_pinned(i)` is called on the calling thread for each slab pinned, in
/// the order they come ready, while the others are still being pinned; an
/// error it returns stops the pinning as a failed host_alloc does. It must
/// not throw.
/// Returns the first error, once every thread has stopped; the slabs pinned
/// are then still in `pinned`, for the caller to free. Thread safety: the
/// driver's host_alloc is called from several threads at once.
cudaError_t pin_slabs(Driver& driver, int device, const std::vector<std::size_t>& sizes, std::vector<void*>& pinned,
                      const std::function<cudaError_t(std::size_t slab)>& on_pinned) noexcept;

}  // namespace sova::detail
