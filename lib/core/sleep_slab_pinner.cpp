// pin_slabs (sleep_slab_pinner.hpp): workers take the next slab to pin from
// a shared index and pin it (pin_host_slab); the calling thread hands each
// pinned slab to on_pinned.
#include "core/sleep_slab_pinner.hpp"

#include "core/thread_name.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

namespace sova::detail {

PinThreads pin_threads_for(std::size_t total) noexcept {
  total = std::clamp<std::size_t>(total, 1, kMaxSleepPinThreadsSetting);
  PinThreads t;
  t.pinners = std::min(total, kMaxPinThreads);
  t.touchers_per_slab = total / t.pinners;
  return t;
}

std::size_t parse_sleep_pin_threads(const char* text) noexcept {
  if (text == nullptr || *text == '\0') return 0;
  std::size_t n = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return 0;
    n = n * 10 + static_cast<std::size_t>(*c - '0');
    if (n > kMaxSleepPinThreadsSetting) return 0;
  }
  return n;
}

PinThreads sleep_pin_threads() noexcept {
  static const PinThreads setting = [] {
    const char* text = std::getenv("SOVA_SLEEP_PIN_THREADS");
    if (text != nullptr) {
      if (const std::size_t n = parse_sleep_pin_threads(text); n != 0) return pin_threads_for(n);
      std::fprintf(stderr,
                   "sova: SOVA_SLEEP_PIN_THREADS=\"%s\" is not a number of threads from 1 to %zu; "
                   "using the default\n",
                   text, kMaxSleepPinThreadsSetting);
    }
    // hardware_concurrency may say 0 (unknown): then one toucher per slab.
    const bool many = std::thread::hardware_concurrency() >= kMaxPinThreads * kSleepTouchThreadsPerSlab;
    return pin_threads_for(kMaxPinThreads * (many ? kSleepTouchThreadsPerSlab : 1));
  }();
  return setting;
}

namespace {

/// What the pinning threads and the calling thread share, under `mu`.
struct PinWork {
  PinWork(Driver& dr, int dev, const std::vector<std::size_t>& s, std::vector<PinnedSlab>& p, std::size_t t)
      : driver(dr), device(dev), sizes(s), pinned(p), touchers(t) {}

  Driver& driver;
  const int device;
  const std::vector<std::size_t>& sizes;
  std::vector<PinnedSlab>& pinned;
  const std::size_t touchers;  ///< threads touching each slab
  std::mutex mu;
  std::condition_variable changed;
  std::size_t next = 0;             ///< the next slab to take
  std::size_t settled = 0;          ///< slabs taken whose pin has returned
  std::vector<std::size_t> ready;   ///< slabs pinned, in the order they came (reserved: no throw)
  cudaError_t error = cudaSuccess;  ///< the first failure; no slab is taken after it
  PinStep failed_step = PinStep::none;  ///< the step of the first failure, where a pin failed

  /// Takes slabs until none is left or one has failed.
  void pin_until_done() noexcept {
    std::unique_lock lock(mu);
    while (error == cudaSuccess && next < sizes.size()) {
      const std::size_t slab = next++;
      lock.unlock();
      // Each thread touches its own slab (with touchers - 1 helpers): the
      // threads fault pages in parallel.
      PinnedSlab p;
      PinStep step = PinStep::none;
      const cudaError_t e = pin_host_slab(driver, device, sizes[slab], touchers, &p, &step);
      lock.lock();
      ++settled;
      if (e == cudaSuccess) {
        pinned[slab] = p;
        ready.push_back(slab);
      } else if (error == cudaSuccess) {
        error = e;
        failed_step = step;
      }
      changed.notify_all();
    }
  }
  /// Every slab taken has returned, and no more will be taken.
  bool all_settled() const noexcept { return settled == next && (error != cudaSuccess || next == sizes.size()); }
};

}  // namespace

cudaError_t pin_slabs(Driver& driver, int device, const std::vector<std::size_t>& sizes,
                      std::vector<PinnedSlab>& pinned, const std::function<cudaError_t(std::size_t)>& on_pinned,
                      PinStep* failed, PinThreads threads_wanted) noexcept {
  if (failed != nullptr) *failed = PinStep::none;
  try {
    pinned.assign(sizes.size(), PinnedSlab{});
    if (sizes.empty()) return cudaSuccess;
    PinWork work(driver, device, sizes, pinned, std::max<std::size_t>(threads_wanted.touchers_per_slab, 1));
    work.ready.reserve(sizes.size());
    std::vector<std::thread> threads;
    if (sizes.size() > 1 && threads_wanted.pinners > 1) {
      const std::size_t wanted = std::min({threads_wanted.pinners, kMaxPinThreads, sizes.size()});
      threads.reserve(wanted);
      for (std::size_t i = 0; i < wanted; ++i) {
        try {
          threads.emplace_back([&work] {
            name_this_thread("sova-pin");
            work.pin_until_done();
          });
        } catch (const std::exception&) {
          break;  // system_error or bad_alloc: fewer threads, the ones started (or this one) pin the rest
        }
      }
    }
    if (threads.empty()) work.pin_until_done();
    // Hand each slab on as it comes ready; on a failure, wait for the slabs
    // still being pinned (the caller frees them) before returning.
    std::size_t handed = 0;
    std::unique_lock lock(work.mu);
    for (;;) {
      work.changed.wait(lock, [&] { return handed < work.ready.size() || work.all_settled(); });
      if (handed == work.ready.size()) break;  // all settled, all handed on
      const std::size_t slab = work.ready[handed++];
      if (work.error != cudaSuccess) continue;  // failed: no more copies
      lock.unlock();
      const cudaError_t e = on_pinned(slab);
      lock.lock();
      if (e != cudaSuccess && work.error == cudaSuccess) work.error = e;  // the workers stop taking slabs
    }
    lock.unlock();
    for (std::thread& t : threads) t.join();
    if (failed != nullptr) *failed = work.failed_step;
    return work.error;
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;  // before any thread started (the vectors)
  }
}

}  // namespace sova::detail
