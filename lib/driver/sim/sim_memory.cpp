// sova sim — simulated device memory (see sim_memory.hpp for the model).
#include "sim_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace sova::sim {
namespace {

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

void* as_ptr(std::uintptr_t va) noexcept { return reinterpret_cast<void*>(va); }

// [va, va+bytes) does not wrap around the address space.
bool fits(std::uintptr_t va, std::size_t bytes) noexcept { return bytes <= UINTPTR_MAX - va; }

int prot_of(cudaMemAccessFlags flags) noexcept {
  switch (flags) {
    case cudaMemAccessFlagsProtReadWrite: return PROT_READ | PROT_WRITE;
    case cudaMemAccessFlagsProtRead: return PROT_READ;
    default: return PROT_NONE;
  }
}

bool valid_flags(cudaMemAccessFlags flags) noexcept {
  return flags == cudaMemAccessFlagsProtNone || flags == cudaMemAccessFlagsProtRead ||
         flags == cudaMemAccessFlagsProtReadWrite;
}

// Flags rank by permissiveness in their numeric order (None 0 < Read 1 < RW 3).
cudaMemAccessFlags most_permissive(const std::vector<cudaMemAccessFlags>& access) {
  cudaMemAccessFlags best = cudaMemAccessFlagsProtNone;
  for (auto f : access) best = std::max(best, f);
  return best;
}

}  // namespace

SimMemory::SimMemory(int device_count, std::size_t total_memory, std::size_t granularity)
    : device_count_(device_count),
      total_memory_(total_memory),
      granularity_(granularity),
      used_(static_cast<std::size_t>(device_count), 0) {}

SimMemory::SimMemory(const SimConfig& c) : SimMemory(c.device_count, c.total_memory, c.granularity) {
  posix_fd_ = c.posix_fd_supported;
  fabric_ = c.fabric_supported;
  compression_ = c.compression_supported;
  host_memory_ = c.host_memory;
  host_used_.assign(static_cast<std::size_t>(c.host_numa_nodes > 0 ? c.host_numa_nodes : 0), 0);
}

SimMemory::~SimMemory() {
  std::lock_guard lock(mu_);
  // Unmapping a reservation also drops the chunk mappings inside it, which
  // frees the memory of chunks that were released while still mapped.
  for (const auto& [va, bytes] : reservations_) ::munmap(as_ptr(va), bytes);
  for (const auto& [handle, chunk] : chunks_) ::close(chunk.fd);
}

bool SimMemory::reserved(std::uintptr_t va, std::size_t bytes) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return false;
  --it;
  return va >= it->first && va - it->first + bytes <= it->second;
}

bool SimMemory::any_mapped(std::uintptr_t va, std::size_t bytes) const {
  auto next = mappings_.upper_bound(va);  // first mapping starting after va
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);  // starts at or before va
    if (prev->first + prev->second.bytes > va) return true;
  }
  return next != mappings_.end() && next->first < va + bytes;
}

cudaError_t SimMemory::reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) {
  if (va == nullptr || bytes == 0 || !aligned(bytes)) return cudaErrorInvalidValue;
  if (alignment & (alignment - 1)) return cudaErrorInvalidValue;  // 0 or a power of two
  const std::size_t align = std::max(alignment, granularity_);
  if (bytes > SIZE_MAX - align) return cudaErrorMemoryAllocation;

  // Over-reserve by `align`, then trim the unaligned head and the tail.
  const std::size_t total = bytes + align;
  void* p = ::mmap(nullptr, total, PROT_NONE, kReserveFlags, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  const auto base = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t start = (base + align - 1) / align * align;
  if (start > base) ::munmap(p, start - base);
  if (base + total > start + bytes) ::munmap(as_ptr(start + bytes), base + total - start - bytes);

  std::lock_guard lock(mu_);
  reservations_.emplace(start, bytes);
  *va = start;
  return cudaSuccess;
}

cudaError_t SimMemory::free(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(va);
  if (it == reservations_.end() || it->second != bytes) return cudaErrorInvalidValue;
  if (any_mapped(va, bytes)) return cudaErrorInvalidValue;
  ::munmap(as_ptr(va), bytes);
  reservations_.erase(it);
  return cudaSuccess;
}

cudaError_t SimMemory::create(int device, std::size_t bytes, PhysicalHandle* out) {
  PhysicalProps props;
  props.location.id = device;
  return create_with(props, bytes, out);
}

cudaError_t SimMemory::release(PhysicalHandle handle) {
  std::lock_guard lock(mu_);
  auto it = chunks_.find(handle);
  if (it == chunks_.end()) return cudaErrorInvalidValue;
  ::close(it->second.fd);
  if (!it->second.imported) used_of(it->second) -= it->second.bytes;
  chunks_.erase(it);
  ++counts_.physical_releases;
  return cudaSuccess;
}

cudaError_t SimMemory::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) {
  std::lock_guard lock(mu_);
  cudaError_t injected;
  if (fail_map_.fire(&injected)) return injected;
  auto it = chunks_.find(handle);
  if (it == chunks_.end()) return cudaErrorInvalidValue;
  const Chunk& chunk = it->second;
  if (va == 0 || !aligned(va) || bytes != chunk.bytes || !fits(va, bytes)) return cudaErrorInvalidValue;
  if (!reserved(va, bytes) || any_mapped(va, bytes)) return cudaErrorInvalidValue;

  if (::mmap(as_ptr(va), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, chunk.fd, 0) == MAP_FAILED) {
    // A failed MAP_FIXED may have dropped the old range: put the reservation back.
    ::mmap(as_ptr(va), bytes, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0);
    return cudaErrorMemoryAllocation;
  }
  mappings_.emplace(va, Mapping{bytes, handle,
                                std::vector<cudaMemAccessFlags>(static_cast<std::size_t>(device_count_) + 1,
                                                                cudaMemAccessFlagsProtNone),
                                chunk.props});
  ++counts_.maps;
  return cudaSuccess;
}

cudaError_t SimMemory::unmap(std::uintptr_t va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (cudaError_t error = cudaSuccess; fail_unmap_.fire(&error)) return error;
  auto it = mappings_.find(va);
  if (it == mappings_.end() || it->second.bytes != bytes) return cudaErrorInvalidValue;
  // Replacing the shared file mapping drops this mapping's hold on the chunk.
  if (::mmap(as_ptr(va), bytes, PROT_NONE, kReserveFlags | MAP_FIXED, -1, 0) == MAP_FAILED) return cudaErrorUnknown;
  mappings_.erase(it);
  ++counts_.unmaps;
  return cudaSuccess;
}

cudaError_t SimMemory::access_at(std::uintptr_t va, int device, cudaMemAccessFlags* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  std::lock_guard lock(mu_);
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin()) return cudaErrorInvalidValue;
  --it;
  if (va >= it->first + it->second.bytes) return cudaErrorInvalidValue;
  *out = it->second.access[static_cast<std::size_t>(device)];
  return cudaSuccess;
}

cudaError_t SimMemory::set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                                  std::size_t count) {
  std::lock_guard lock(mu_);
  cudaError_t injected;
  if (fail_set_access_.fire(&injected)) return injected;
  if (descs == nullptr || count == 0) return cudaErrorInvalidValue;
  if (bytes == 0 || !aligned(va) || !aligned(bytes) || !fits(va, bytes)) return cudaErrorInvalidValue;
  bool host_access = false;  // a host-NUMA descriptor: only over host-NUMA chunks (checked below)
  for (std::size_t i = 0; i < count; ++i) {
    if (descs[i].location.type == cudaMemLocationTypeHostNuma) {
      if (descs[i].location.id < 0 || static_cast<std::size_t>(descs[i].location.id) >= host_used_.size())
        return cudaErrorInvalidValue;
      host_access = true;
    } else if (descs[i].location.type != cudaMemLocationTypeDevice) {
      return cudaErrorInvalidValue;
    } else if (!valid_device(descs[i].location.id)) {
      return cudaErrorInvalidDevice;
    }
    if (!valid_flags(descs[i].flags)) return cudaErrorInvalidValue;
  }

  // Validate the whole range before touching anything: whole, contiguous mappings.
  std::vector<std::map<std::uintptr_t, Mapping>::iterator> hit;
  std::uintptr_t cursor = va;
  for (auto it = mappings_.find(va); cursor < va + bytes; ++it) {
    if (it == mappings_.end() || it->first != cursor) return cudaErrorInvalidValue;
    cursor += it->second.bytes;
    hit.push_back(it);
  }
  if (cursor != va + bytes) return cudaErrorInvalidValue;  // cuts the last mapping
  // CUDA: host-NUMA access only for memory created on a host-NUMA location.
  for (auto it : hit) {
    if (host_access && it->second.props.location.type != cudaMemLocationTypeHostNuma) return cudaErrorInvalidValue;
  }

  for (auto it : hit) {
    Mapping& m = it->second;
    for (std::size_t i = 0; i < count; ++i) {  // later descriptors win
      const bool host = descs[i].location.type == cudaMemLocationTypeHostNuma;
      m.access[host ? m.access.size() - 1 : static_cast<std::size_t>(descs[i].location.id)] = descs[i].flags;
    }
    if (::mprotect(as_ptr(it->first), m.bytes, prot_of(most_permissive(m.access))) != 0)
      return cudaErrorUnknown;  // not expected: the range is our own mapping
  }
  ++counts_.set_access_calls;
  return cudaSuccess;
}

cudaError_t SimMemory::info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  std::lock_guard lock(mu_);
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  *free_bytes = total_memory_ - used_[static_cast<std::size_t>(device)];
  *total_bytes = total_memory_;
  return cudaSuccess;
}

void SimMemory::fail_create_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_create_.arm(n, error);
}

void SimMemory::fail_map_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_map_.arm(n, error);
}

void SimMemory::fail_set_access_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_set_access_.arm(n, error);
}

void SimMemory::fail_unmap_at(int n, cudaError_t error) {
  std::lock_guard lock(mu_);
  fail_unmap_.arm(n, error);
}

void SimMemory::fill_counters(SimCounters* out) const {
  std::lock_guard lock(mu_);
  out->physical_bytes = 0;
  for (auto u : used_) out->physical_bytes += u;
  out->host_bytes = 0;
  for (auto u : host_used_) out->host_bytes += u;
  out->imported_handles = 0;
  for (const auto& [handle, chunk] : chunks_) out->imported_handles += chunk.imported ? 1 : 0;
  out->physical_creates = counts_.physical_creates;
  out->physical_releases = counts_.physical_releases;
  out->maps = counts_.maps;
  out->unmaps = counts_.unmaps;
  out->set_access_calls = counts_.set_access_calls;
  out->reservations = reservations_.size();
  out->mappings = mappings_.size();
}

}  // namespace sova::sim
