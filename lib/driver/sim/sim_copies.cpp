// sova sim — pinned host memory and copies (sim_copies.hpp), and the
// SimDriver methods over them.
#include "sim_copies.hpp"

#include "sim_state.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace sova {
namespace sim {

SimCopies::~SimCopies() {
  for (const auto& [ptr, bytes] : held_) std::free(ptr);
}

cudaError_t SimCopies::host_alloc(std::size_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_alloc_.fire(&error)) return error;
  void* p = std::malloc(bytes);  // untouched pages cost no host memory until a copy writes them
  if (p == nullptr) return cudaErrorMemoryAllocation;
  try {
    held_.emplace(p, bytes);
  } catch (const std::bad_alloc&) {
    std::free(p);
    return cudaErrorMemoryAllocation;
  }
  host_bytes_ += bytes;
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

cudaError_t SimCopies::before_copy(std::size_t bytes) {
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_copy_.fire(&error)) return error;
  ++copies_;
  bytes_copied_ += bytes;
  return cudaSuccess;
}

void SimCopies::fail_host_alloc_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_alloc_.arm(n, error);
}

void SimCopies::fail_copy_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_copy_.arm(n, error);
}

std::size_t SimCopies::host_bytes() const {
  std::lock_guard lock(mu_);
  return host_bytes_;
}

std::size_t SimCopies::copies() const {
  std::lock_guard lock(mu_);
  return copies_;
}

std::size_t SimCopies::bytes_copied() const {
  std::lock_guard lock(mu_);
  return bytes_copied_;
}

}  // namespace sim

cudaError_t SimDriver::host_alloc(std::size_t bytes, void** out) noexcept {
  return sim::guarded([&] { return state_->copies.host_alloc(bytes, out); });
}

cudaError_t SimDriver::host_free(void* ptr) noexcept {
  return sim::guarded([&] { return state_->copies.host_free(ptr); });
}

cudaError_t SimDriver::memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept {
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  return sim::guarded([&] {
    if (const cudaError_t error = state_->copies.before_copy(bytes); error != cudaSuccess) return error;
    if (bytes == 0) return cudaSuccess;
    sim::Item item;
    item.work = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
    if (state_->graphs.capture_item(stream, item)) return cudaSuccess;
    return state_->streams->submit(stream, std::move(item));
  });
}

void SimDriver::fail_host_alloc_at(int n, cudaError_t error) { state_->copies.fail_host_alloc_at(n, error); }
void SimDriver::fail_memcpy_at(int n, cudaError_t error) { state_->copies.fail_copy_at(n, error); }
void SimDriver::fail_unmap_at(int n, cudaError_t error) { state_->memory.fail_unmap_at(n, error); }

}  // namespace sova
