// sova sim — pinned host memory and copies (sim_copies.hpp), and the
// SimDriver methods over them.
#include "sim_copies.hpp"

#include "sim_state.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace sova {
namespace sim {
namespace {

/// "a copy of N bytes: why", formatted without std::string concatenation
/// (which GCC 12 at -O3 warns about falsely, -Wrestrict).
std::string what_faulted(const char* work, std::size_t bytes, const std::string& why) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s %zu bytes: %s", work, bytes, why.c_str());
  return buf;
}

/// Enqueues `work` on `stream` after `delay` (or into the stream's capture).
cudaError_t enqueue(SimDriver::State& state, cudaStream_t stream, std::chrono::microseconds delay,
                    std::function<void()> work) {
  Item item;
  item.delay = delay;
  item.work = std::move(work);
  if (state.graphs.capture_item(stream, item)) return cudaSuccess;
  return state.streams->submit(stream, std::move(item));
}

}  // namespace

SimCopies::~SimCopies() {
  for (const auto& [ptr, bytes] : held_) std::free(ptr);
}

void SimCopies::pin_delay(std::size_t& calls) {
  std::chrono::microseconds delay{0};
  {
    std::lock_guard lock(mu_);
    ++calls;
    delay = pin_delay_;
  }
  if (delay.count() != 0) std::this_thread::sleep_for(delay);  // pinning's time, outside the lock
}

cudaError_t SimCopies::host_alloc(std::size_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  pin_delay(host_alloc_calls_);
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_alloc_.fire(&error)) return error;
  if (limit_ != 0 && (bytes > limit_ || host_bytes_ > limit_ - bytes)) return cudaErrorMemoryAllocation;
  void* p = std::malloc(bytes);  // untouched pages cost no host memory until a copy writes them
  if (p == nullptr) return cudaErrorMemoryAllocation;
  try {
    held_.emplace(p, bytes);
  } catch (const std::bad_alloc&) {
    std::free(p);
    return cudaErrorMemoryAllocation;
  }
  host_bytes_ += bytes;
  ++host_allocs_;
  *out = p;
  return cudaSuccess;
}

cudaError_t SimCopies::host_free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard lock(mu_);
  auto it = held_.find(ptr);
  if (it == held_.end()) return cudaErrorInvalidValue;
  host_bytes_ -= it->second;
  held_.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t SimCopies::host_register(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return cudaErrorInvalidValue;
  pin_delay(host_register_calls_);
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_register_.fire(&error)) return error;
  const auto* p = static_cast<const char*>(ptr);
  auto next = registered_.lower_bound(p);
  if (next != registered_.end() && static_cast<std::size_t>(next->first - p) < bytes)
    return cudaErrorHostMemoryAlreadyRegistered;
  if (next != registered_.begin()) {
    auto prev = std::prev(next);
    if (static_cast<std::size_t>(p - prev->first) < prev->second) return cudaErrorHostMemoryAlreadyRegistered;
  }
  if (limit_ != 0 && (bytes > limit_ || host_bytes_ > limit_ - bytes)) return cudaErrorMemoryAllocation;
  try {
    registered_.emplace(p, bytes);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  host_bytes_ += bytes;
  ++host_registers_;
  return cudaSuccess;
}

cudaError_t SimCopies::host_unregister(void* ptr) {
  std::lock_guard lock(mu_);
  const auto it = registered_.find(static_cast<const char*>(ptr));
  if (it == registered_.end()) return cudaErrorHostMemoryNotRegistered;
  host_bytes_ -= it->second;
  registered_.erase(it);
  return cudaSuccess;
}

bool SimCopies::registered_within(const void* ptr, std::size_t bytes) const {
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard lock(mu_);
  auto next = registered_.lower_bound(p);
  if (next != registered_.end() && static_cast<std::size_t>(next->first - p) < bytes) return true;
  if (next == registered_.begin()) return false;
  const auto prev = std::prev(next);
  return static_cast<std::size_t>(p - prev->first) < prev->second;
}

cudaError_t SimCopies::before_copy(std::size_t bytes, std::chrono::microseconds* delay) {
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_copy_.fire(&error)) return error;
  ++copies_;
  bytes_copied_ += bytes;
  *delay = delay_;
  return cudaSuccess;
}

cudaError_t SimCopies::before_memset(std::size_t bytes, std::chrono::microseconds* delay) {
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_memset_.fire(&error)) return error;
  if (bytes == 0) return cudaSuccess;  // enqueues nothing: not counted
  ++memsets_;
  bytes_set_ += bytes;
  *delay = delay_;
  return cudaSuccess;
}

void SimCopies::delay_copies(std::chrono::microseconds duration) {
  std::lock_guard lock(mu_);
  delay_ = duration;
}

void SimCopies::delay_host_pins(std::chrono::microseconds duration) {
  std::lock_guard lock(mu_);
  pin_delay_ = duration;
}

void SimCopies::fail_host_alloc_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_alloc_.arm(n, error);
}

void SimCopies::fail_host_register_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_register_.arm(n, error);
}

void SimCopies::fail_copy_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_copy_.arm(n, error);
}

void SimCopies::fail_memset_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_memset_.arm(n, error);
}

std::size_t SimCopies::host_bytes() const {
  std::lock_guard lock(mu_);
  return host_bytes_;
}

std::size_t SimCopies::host_alloc_calls() const {
  std::lock_guard lock(mu_);
  return host_alloc_calls_;
}

std::size_t SimCopies::host_allocs() const {
  std::lock_guard lock(mu_);
  return host_allocs_;
}

std::size_t SimCopies::host_register_calls() const {
  std::lock_guard lock(mu_);
  return host_register_calls_;
}

std::size_t SimCopies::host_registers() const {
  std::lock_guard lock(mu_);
  return host_registers_;
}

std::size_t SimCopies::copies() const {
  std::lock_guard lock(mu_);
  return copies_;
}

std::size_t SimCopies::bytes_copied() const {
  std::lock_guard lock(mu_);
  return bytes_copied_;
}

std::size_t SimCopies::memsets() const {
  std::lock_guard lock(mu_);
  return memsets_;
}

std::size_t SimCopies::bytes_set() const {
  std::lock_guard lock(mu_);
  return bytes_set_;
}

}  // namespace sim

cudaError_t SimDriver::host_alloc(std::size_t bytes, void** out) noexcept {
  state_->count(SimCall::host_alloc);
  return sim::guarded([&] { return state_->copies.host_alloc(bytes, out); });
}

cudaError_t SimDriver::host_alloc_on(int device, std::size_t bytes, void** out) noexcept {
  state_->count(SimCall::host_alloc_on);
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  return sim::guarded([&] { return state_->copies.host_alloc(bytes, out); });
}

cudaError_t SimDriver::host_free(void* ptr) noexcept {
  state_->count(SimCall::host_free);
  return sim::guarded([&] { return state_->copies.host_free(ptr); });
}

cudaError_t SimDriver::host_map(std::size_t bytes, void** out) noexcept {
  state_->count(SimCall::host_map);
  return sim::guarded([&] { return state_->host_maps.map(bytes, out); });
}

cudaError_t SimDriver::host_unmap(void* ptr, std::size_t bytes) noexcept {
  state_->count(SimCall::host_unmap);
  return sim::guarded([&] {
    // Pages still locked stay locked on a real host after munmap: a leak
    // the simulation refuses, so that a test sees the order broken.
    if (state_->copies.registered_within(ptr, bytes)) return cudaErrorInvalidValue;
    return state_->host_maps.unmap(ptr, bytes);
  });
}

cudaError_t SimDriver::host_register_on(int device, void* ptr, std::size_t bytes) noexcept {
  state_->count(SimCall::host_register_on);
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  return sim::guarded([&] {
    // Only what host_map gave: the pool registers nothing else.
    if (!state_->host_maps.contains(ptr, bytes)) return cudaErrorInvalidValue;
    return state_->copies.host_register(ptr, bytes);
  });
}

cudaError_t SimDriver::host_unregister(void* ptr) noexcept {
  state_->count(SimCall::host_unregister);
  return sim::guarded([&] { return state_->copies.host_unregister(ptr); });
}

cudaError_t SimDriver::memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept {
  state_->count(SimCall::memcpy_async);
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  return sim::guarded([&] {
    std::chrono::microseconds delay{0};
    if (const cudaError_t error = state_->copies.before_copy(bytes, &delay); error != cudaSuccess) return error;
    if (bytes == 0) return cudaSuccess;
    // Checked as it runs: the streams are drained before the State goes.
    return sim::enqueue(*state_, stream, delay, [state = state_.get(), dst, src, bytes] {
      std::string why;
      if (!state->memory.copy(dst, src, bytes, &why)) state->faults.report(sim::what_faulted("a copy", bytes, why));
    });
  });
}

cudaError_t SimDriver::memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream) noexcept {
  state_->count(SimCall::memset_async);
  if (ptr == nullptr && bytes != 0) return cudaErrorInvalidValue;
  return sim::guarded([&] {
    // A pool's probe (0 bytes) meets the failure point too: a test arms it
    // with cudaErrorNotSupported to model a driver without memsets.
    std::chrono::microseconds delay{0};
    if (const cudaError_t error = state_->copies.before_memset(bytes, &delay); error != cudaSuccess) return error;
    if (bytes == 0) return cudaSuccess;
    // Checked as it runs, like a copy's write side.
    return sim::enqueue(*state_, stream, delay, [state = state_.get(), ptr, value, bytes] {
      std::string why;
      if (!state->memory.touch(ptr, bytes, true, [&] { std::memset(ptr, value, bytes); }, &why)) {
        state->faults.report(sim::what_faulted("a memset", bytes, why));
      }
    });
  });
}

void SimDriver::delay_copies(std::chrono::microseconds duration) { state_->copies.delay_copies(duration); }
void SimDriver::delay_host_pins(std::chrono::microseconds duration) { state_->copies.delay_host_pins(duration); }

void SimDriver::launch_touching(cudaStream_t stream, const void* ptr, std::size_t bytes, bool writes,
                                std::function<void()> work) {
  sim::Item item;
  item.work = [state = state_.get(), ptr, bytes, writes, work = std::move(work)] {
    std::string why;
    if (!state->memory.touch(ptr, bytes, writes, work, &why)) {
      state->faults.report(sim::what_faulted(writes ? "a kernel writing" : "a kernel reading", bytes, why));
    }
  };
  if (state_->graphs.capture_item(stream, item)) return;
  if (state_->streams->submit(stream, std::move(item)) != cudaSuccess)
    throw std::invalid_argument("sova sim: launch_touching on an invalid stream");
}

std::size_t SimDriver::faults() const { return state_->faults.count(); }
std::string SimDriver::first_fault() const { return state_->faults.first(); }

void SimDriver::fail_host_alloc_at(int n, cudaError_t error) { state_->copies.fail_host_alloc_at(n, error); }
void SimDriver::fail_host_map_at(int n, cudaError_t error) { state_->host_maps.fail_map_at(n, error); }
void SimDriver::fail_host_register_at(int n, cudaError_t error) {
  state_->copies.fail_host_register_at(n, error);
}
void SimDriver::fail_memcpy_at(int n, cudaError_t error) { state_->copies.fail_copy_at(n, error); }
void SimDriver::fail_memset_at(int n, cudaError_t error) { state_->copies.fail_memset_at(n, error); }
void SimDriver::fail_unmap_at(int n, cudaError_t error) { state_->memory.fail_unmap_at(n, error); }

}  // namespace sova
