// pin_slabs (sleep_slab_pinner.hpp): workers take the next slab to pin from
// a shared index; the calling thread hands each pinned slab to on_pinned.
#include "core/sleep_slab_pinner.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>

namespace sova::detail {

namespace {

/// What the pinning threads and the calling thread share, under `mu`.
struct PinWork {
  PinWork(Driver& dr, int dev, const std::vector<std::size_t>& s, std::vector<void*>& p)
      : driver(dr), device(dev), sizes(s), pinned(p) {}

  Driver& driver;
  const int device;
  const std::vector<std::size_t>& sizes;
  std::vector<void*>& pinned;
  std::mutex mu;
  std::condition_variable changed;
  std::size_t next = 0;             ///< the next slab to take
  std::size_t settled = 0;          ///< slabs taken whose host_alloc has returned
  std::vector<std::size_t> ready;   ///< slabs pinned, in the order they came (reserved: no throw)
  cudaError_t error = cudaSuccess;  ///< the first failure; no slab is taken after it

  /// Takes slabs until none is left or one has failed.
  void pin_until_done() noexcept {
    std::unique_lock lock(mu);
    while (error == cudaSuccess && next < sizes.size()) {
      const std::size_t slab = next++;
      lock.unlock();
      void* p = nullptr;
      const cudaError_t e = driver.host_alloc_on(device, sizes[slab], &p);
      lock.lock();
      ++settled;
      if (e == cudaSuccess) {
        pinned[slab] = p;
        ready.push_back(slab);
      } else if (error == cudaSuccess) {
        error = e;
      }
      changed.notify_all();
    }
  }
  /// Every slab taken has returned, and no more will be taken.
  bool all_settled() const noexcept { return settled == next && (error != cudaSuccess || next == sizes.size()); }
};

}  // namespace

cudaError_t pin_slabs(Driver& driver, int device, const std::vector<std::size_t>& sizes, std::vector<void*>& pinned,
                      const std::function<cudaError_t(std::size_t)>& on_pinned) noexcept {
  try {
    pinned.assign(sizes.size(), nullptr);
    if (sizes.empty()) return cudaSuccess;
    PinWork work(driver, device, sizes, pinned);
    work.ready.reserve(sizes.size());
    std::vector<std::thread> threads;
    if (sizes.size() > 1) {
      const std::size_t wanted = std::min(kMaxPinThreads, sizes.size());
      threads.reserve(wanted);
      for (std::size_t i = 0; i < wanted; ++i) {
        try {
          threads.emplace_back([&work] { work.pin_until_done(); });
        } catch (const std::system_error&) {
          break;  // fewer threads: the ones started (or this one) pin the rest
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
    return work.error;
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;  // before any thread started (the vectors)
  }
}

}  // namespace sova::detail
