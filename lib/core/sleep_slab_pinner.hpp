// pin_slabs: the slabs of a sleep's backup that are not held yet, pinned on
// several host threads at once, each handed on as soon as it is pinned.
//
// How a slab is pinned (sleep_host_slab.hpp): mapped, its pages touched by
// the thread that pins it (and a helper where the host has the cores), then
// registered with the driver. Several threads
// each pinning a slab of their own fault pages in parallel; cudaHostAlloc
// did not scale so (a probe on an H200 host: 1.7 GiB/s from one
// thread, 2.0 GiB/s from eight, against 14.5 GiB/s for eight threads
// touching mapped memory that is then registered). The caller copies into
// each slab as soon as it is pinned (on_pinned), so that the copies of slab
// i overlap the pinning of the slabs after it: a first sleep is bounded by
// the pinning, not by pinning plus copying.
//
// Limits it can hit, each leaving nothing pinned by this call once it
// returns (the caller frees the slabs handed back): the host refusing the
// mapping (out of memory or address space: PinStep::map), the driver
// refusing to lock it (the locked-memory limit, `ulimit -l`, or the host's
// memory: PinStep::register_), or host_alloc_on refusing on a driver without
// host_map (PinStep::alloc).
//
// Threads: sleep_pin_threads() says how many (SOVA_SLEEP_PIN_THREADS, or a
// default from the host's hardware threads): pinning threads named
// "sova-pin", each with touchers_per_slab - 1 helpers ("sova-touch"), all
// started by the call and joined before it returns: none is left running
// between sleeps.
#pragma once

#include "core/sleep_host_slab.hpp"

#include <sova/driver.hpp>

#include <cstddef>
#include <functional>
#include <vector>

namespace sova::detail {

/// At most this many threads pin at once (each pins a slab at a time); the
/// slabs of a sleep are cut for this many (pool_sleep.cpp).
inline constexpr std::size_t kMaxPinThreads = 8;
/// By default each pinning thread touches its slab's pages with this many
/// threads in all (itself and helpers named "sova-touch", started and
/// joined by each pin), where the host has at least kMaxPinThreads times as
/// many hardware threads; else alone. So a sleep runs at most 16 threads at
/// once: a probe on an H200 host touched 8 GiB at 14.5 GiB/s on 8 threads
/// and 19.2 GiB/s on 16.
inline constexpr std::size_t kSleepTouchThreadsPerSlab = 2;
/// The most threads SOVA_SLEEP_PIN_THREADS may ask for.
inline constexpr std::size_t kMaxSleepPinThreadsSetting = 64;

/// The threads a sleep pins with: `pinners` threads (at most
/// kMaxPinThreads) each pinning a slab at a time, its pages touched by
/// `touchers_per_slab` threads (the pinner and touchers_per_slab - 1 helpers).
struct PinThreads {
  std::size_t pinners = kMaxPinThreads;
  std::size_t touchers_per_slab = 1;

  std::size_t total() const noexcept { return pinners * touchers_per_slab; }
};

/// What a setting of N threads in all gives: min(N, kMaxPinThreads) pinners,
/// N / pinners touchers each (so never more than N threads at once). N is
/// 1 to kMaxSleepPinThreadsSetting.
PinThreads pin_threads_for(std::size_t total) noexcept;

/// The process's setting, read once: SOVA_SLEEP_PIN_THREADS=N (1 to
/// kMaxSleepPinThreadsSetting) when set, else kMaxPinThreads *
/// kSleepTouchThreadsPerSlab on a host with at least that many hardware
/// threads and kMaxPinThreads otherwise. A value that is not such a number
/// is refused with a line on stderr naming it, and the default is used.
PinThreads sleep_pin_threads() noexcept;

/// Parses a SOVA_SLEEP_PIN_THREADS value: N when it is a decimal number of 1
/// to kMaxSleepPinThreadsSetting, else 0.
std::size_t parse_sleep_pin_threads(const char* text) noexcept;

/// Pins one slab of each of `sizes` (pin_host_slab, its pages touched by
/// `threads.touchers_per_slab` threads), on up to `threads.pinners` threads
/// (on the calling thread alone for a single slab or a single pinner, or
/// when no thread can be started).
/// `pinned` is resized to sizes.size() and gets each slab (ptr nullptr for
/// a slab not pinned).
/// `on_pinned(i)` is called on the calling thread for each slab pinned, in
/// the order they come ready, while the others are still being pinned; an
/// error it returns stops the pinning as a failed pin does. It must not
/// throw.
/// Returns the first error, once every thread has stopped, and (`failed`,
/// when not null) the step of pinning that refused (PinStep::none when the
/// error came from on_pinned, or nothing failed); the slabs pinned are then
/// still in `pinned`, for the caller to give back (unpin_host_slab).
/// Thread safety: the driver is called from several threads at once.
cudaError_t pin_slabs(Driver& driver, int device, const std::vector<std::size_t>& sizes,
                      std::vector<PinnedSlab>& pinned, const std::function<cudaError_t(std::size_t slab)>& on_pinned,
                      PinStep* failed = nullptr, PinThreads threads = sleep_pin_threads()) noexcept;

}  // namespace sova::detail
