// sova sim — host mappings for backups (sim_host_maps.hpp).
#include "sim_host_maps.hpp"

#include "driver/host_pages.hpp"

#include <new>

namespace sova::sim {

SimHostMaps::~SimHostMaps() {
  for (const auto& [start, bytes] : live_) (void)driver_detail::unmap_host_pages(const_cast<char*>(start), bytes);
}

cudaError_t SimHostMaps::map(std::size_t bytes, void** out) {
  if (out == nullptr || bytes == 0) return cudaErrorInvalidValue;
  std::lock_guard lock(mu_);
  cudaError_t error = cudaSuccess;
  if (fail_map_.fire(&error)) return error;
  void* p = driver_detail::map_host_pages(bytes);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  try {
    live_.emplace(static_cast<const char*>(p), bytes);
  } catch (const std::bad_alloc&) {
    (void)driver_detail::unmap_host_pages(p, bytes);
    return cudaErrorMemoryAllocation;
  }
  mapped_bytes_ += bytes;
  ++maps_;
  *out = p;
  return cudaSuccess;
}

cudaError_t SimHostMaps::unmap(void* ptr, std::size_t bytes) {
  std::lock_guard lock(mu_);
  const auto it = live_.find(static_cast<const char*>(ptr));
  if (it == live_.end() || it->second != bytes) return cudaErrorInvalidValue;
  if (driver_detail::unmap_host_pages(ptr, bytes) != 0) return cudaErrorInvalidValue;
  live_.erase(it);
  mapped_bytes_ -= bytes;
  ++unmaps_;
  return cudaSuccess;
}

bool SimHostMaps::contains(const void* ptr, std::size_t bytes) const {
  const auto* p = static_cast<const char*>(ptr);
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(p);  // the first mapping starting after p
  if (it == live_.begin()) return false;
  --it;
  return p >= it->first && bytes <= it->second && static_cast<std::size_t>(p - it->first) <= it->second - bytes;
}

void SimHostMaps::fail_map_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_map_.arm(n, error);
}

std::size_t SimHostMaps::mapped_bytes() const {
  std::lock_guard lock(mu_);
  return mapped_bytes_;
}

std::size_t SimHostMaps::maps() const {
  std::lock_guard lock(mu_);
  return maps_;
}

std::size_t SimHostMaps::unmaps() const {
  std::lock_guard lock(mu_);
  return unmaps_;
}

}  // namespace sova::sim
