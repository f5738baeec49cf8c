// pin_host_slab and unpin_host_slab (sleep_host_slab.hpp).
#include "core/sleep_host_slab.hpp"

#include "core/thread_name.hpp"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace sova::detail {

namespace {

/// Bytes between two touches: the smallest page a host maps. With huge
/// pages the first touch of each 2 MiB faults it all and the rest find it.
constexpr std::size_t kTouchStride = 4096;

/// Faults in [p, p + bytes) by writing a byte of each page (a read would
/// map the shared zero page, and the register would fault them again).
void touch_pages(char* p, std::size_t bytes) noexcept {
  volatile char* v = p;
  for (std::size_t at = 0; at < bytes; at += kTouchStride) v[at] = 0;
}

/// Touches the slab on `threads` threads: each a contiguous share, the
/// calling thread the first share and any whose thread could not start.
void touch_slab(char* p, std::size_t bytes, std::size_t threads) noexcept {
  threads = std::clamp<std::size_t>(threads, 1, kMaxTouchThreads);
  const std::size_t pages = (bytes + kTouchStride - 1) / kTouchStride;
  threads = std::min(threads, pages);
  const std::size_t share = (pages + threads - 1) / threads * kTouchStride;
  std::vector<std::thread> helpers;
  std::size_t left_from = share;  // what no helper took: the caller touches it
  try {
    helpers.reserve(threads - 1);
    for (std::size_t from = share; from < bytes; from += share) {
      const std::size_t n = std::min(share, bytes - from);
      helpers.emplace_back([p, from, n] {
        name_this_thread("sova-touch");
        touch_pages(p + from, n);
      });
      left_from = from + n;
    }
  } catch (const std::exception&) {
    // bad_alloc or system_error: fewer helpers, the caller touches the rest
  }
  touch_pages(p, std::min(share, bytes));
  if (left_from < bytes) touch_pages(p + left_from, bytes - left_from);
  for (std::thread& t : helpers) t.join();
}

}  // namespace

cudaError_t pin_host_slab(Driver& driver, int device, std::size_t bytes, std::size_t touch_threads, PinnedSlab* out,
                          PinStep* failed) noexcept {
  PinStep step = PinStep::none;
  cudaError_t error = cudaSuccess;
  void* p = nullptr;
  if (const cudaError_t e = driver.host_map(bytes, &p); e == cudaErrorNotSupported) {
    error = driver.host_alloc_on(device, bytes, &p);  // a driver written before host_map
    if (error == cudaSuccess) *out = PinnedSlab{p, bytes, SlabPinning::allocated};
    step = PinStep::alloc;
  } else if (e != cudaSuccess) {
    error = e;
    step = PinStep::map;
  } else {
    touch_slab(static_cast<char*>(p), bytes, touch_threads);
    error = driver.host_register_on(device, p, bytes);
    if (error == cudaSuccess) {
      *out = PinnedSlab{p, bytes, SlabPinning::registered};
    } else {
      (void)driver.host_unmap(p, bytes);  // nothing locked: the pages go back to the host
    }
    step = PinStep::register_;
  }
  if (failed != nullptr) *failed = error == cudaSuccess ? PinStep::none : step;
  return error;
}

void unpin_host_slab(Driver& driver, const PinnedSlab& slab) noexcept {
  if (slab.ptr == nullptr) return;
  if (slab.how == SlabPinning::allocated) {
    (void)driver.host_free(slab.ptr);
    return;
  }
  if (driver.host_unregister(slab.ptr) == cudaSuccess) (void)driver.host_unmap(slab.ptr, slab.bytes);
}

}  // namespace sova::detail
