// One slab of a sleep's backup, pinned in place: host memory mapped
// (Driver::host_map: anonymous, huge pages advised), its pages touched
// (faulted in) by the pinning thread and, for a slab pinned alone, by a few
// more, then page-locked (Driver::host_register_on); given back unlocked
// (host_unregister) and unmapped (host_unmap), so that the process's
// resident memory drops.
//
// Why: cudaHostAlloc faults and pins its pages itself, serialized in the
// driver: 1.7 GiB/s from one thread, 2.0 GiB/s from eight on an H200 host
// (a probe). Pages faulted in by the kernel on several threads,
// then registered, pinned at 14.5 GiB/s (8 threads) and 19.2 GiB/s
// (16 threads) on the same host (the same probe). MAP_POPULATE faults on one
// thread (2.3 GiB/s there): the pages are touched here instead.
//
// A driver without host_map (cudaErrorNotSupported: one written before it)
// pins the slab with host_alloc_on, as before.
#pragma once

#include <sova/driver.hpp>

#include <cstddef>

namespace sova::detail {

/// How a slab was pinned, so that it is given back the same way.
enum class SlabPinning : unsigned char {
  registered,  ///< host_map + host_register_on: host_unregister + host_unmap
  allocated,   ///< host_alloc_on (a driver without host_map): host_free
};

/// Which step of pinning a slab failed: what the host refused.
enum class PinStep : unsigned char {
  none,      ///< nothing failed
  map,       ///< host_map: the host refused the memory (out of memory, address space)
  register_, ///< host_register_on: the driver refused to lock it (locked-memory limit, host memory)
  alloc,     ///< host_alloc_on: the driver refused pinned memory
};

struct PinnedSlab {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  SlabPinning how = SlabPinning::registered;
};

/// At most this many threads touch one slab's pages (the calling thread
/// one of them); threads that cannot be started leave their share to it.
inline constexpr std::size_t kMaxTouchThreads = 8;

/// A slab pinned alone (pin-ahead's, one at a time) has its pages touched
/// by this many threads: started and joined by each pin.
inline constexpr std::size_t kPinAheadTouchThreads = 4;

/// Pins a slab of `bytes` for `device`'s copies,
/// its pages touched on `touch_threads` threads (clamped to 1 and
/// kMaxTouchThreads; the calling thread is one, the others are started and
/// joined here). On success `*out` holds it; on failure nothing is held
/// (what was mapped is unmapped), the driver's error is returned and
/// `*failed` (when not null) says which step refused.
/// Thread safety: any number of threads at once (the driver's calls are).
cudaError_t pin_host_slab(Driver& driver, int device, std::size_t bytes, std::size_t touch_threads, PinnedSlab* out,
                          PinStep* failed = nullptr) noexcept;

/// Gives a slab back as it was pinned; no copy may still use it. A slab
/// whose unregister fails stays mapped (its pages still locked): unmapping
/// it would leave them locked with no way to unlock them.
void unpin_host_slab(Driver& driver, const PinnedSlab& slab) noexcept;

}  // namespace sova::detail
