// sova sim — physical memory with properties: host-NUMA chunks, compression,
// and POSIX file descriptor export/import (sim_memory.hpp has the model).
//
// A chunk is a memfd, so exporting it is dup(2) and a descriptor passed over a
// Unix socket (SCM_RIGHTS) maps the same bytes in another process, as a CUDA
// POSIX handle does. The memfd's name carries the chunk's properties
// ("sova-sim-chunk:<location type>:<id>:<handle types>:<compressed>"), so an
// importer in another process learns them the way cuMemGetAllocationProperties
// FromHandle tells a CUDA importer.
#include "sim_memory.hpp"

#include <cerrno>
#include <cstdio>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace sova::sim {
namespace {

constexpr const char kChunkName[] = "sova-sim-chunk";

std::string name_of(const PhysicalProps& p) {
  return std::string(kChunkName) + ":" + std::to_string(static_cast<int>(p.location.type)) + ":" +
         std::to_string(p.location.id) + ":" + std::to_string(p.handle_types) + ":" + (p.compressible ? "1" : "0");
}

/// The properties named by a sim chunk's memfd, read through /proc; false for
/// anything else (another file, a closed descriptor).
bool props_of_fd(int fd, PhysicalProps* out) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  char target[256] = {};
  const ssize_t n = ::readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  int type = 0, id = 0, comp = 0;
  unsigned handles = 0;
  if (std::sscanf(target, "/memfd:sova-sim-chunk:%d:%d:%u:%d", &type, &id, &handles, &comp) != 4) return false;
  out->location.type = static_cast<cudaMemLocationType>(type);
  out->location.id = id;
  out->handle_types = handles;
  out->compressible = comp != 0;
  return true;
}

constexpr unsigned kKnownHandleTypes = cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;

}  // namespace

cudaError_t SimMemory::create_with(const PhysicalProps& props_in, std::size_t bytes, PhysicalHandle* out) {
  std::lock_guard lock(mu_);
  cudaError_t injected;
  if (fail_create_.fire(&injected)) return injected;
  if (out == nullptr) return cudaErrorInvalidValue;
  PhysicalProps props = props_in;
  int device = 0;
  switch (props.location.type) {
    case cudaMemLocationTypeDevice:
      if (!valid_device(props.location.id)) return cudaErrorInvalidDevice;
      device = props.location.id;
      break;
    case cudaMemLocationTypeHostNuma:
      if (host_used_.empty()) return cudaErrorNotSupported;
      if (props.location.id < 0 || static_cast<std::size_t>(props.location.id) >= host_used_.size())
        return cudaErrorInvalidValue;
      props.compressible = false;  // CUDA compresses device memory only
      break;
    default: return cudaErrorInvalidValue;
  }
  if ((props.handle_types & ~kKnownHandleTypes) != 0) return cudaErrorInvalidValue;
  if ((props.handle_types & cudaMemHandleTypePosixFileDescriptor) != 0 && !posix_fd_) return cudaErrorNotSupported;
  if ((props.handle_types & cudaMemHandleTypeFabric) != 0 && !fabric_) return cudaErrorNotSupported;
  if (!compression_) props.compressible = false;  // a request, never a failure
  if (bytes == 0 || !aligned(bytes)) return cudaErrorInvalidValue;
  Chunk chunk{-1, bytes, device, props, false};
  std::size_t& used = used_of(chunk);
  const std::size_t limit = props.location.type == cudaMemLocationTypeHostNuma ? host_memory_ : total_memory_;
  if (bytes > limit - used) return cudaErrorMemoryAllocation;

  const int fd = ::memfd_create(name_of(props).c_str(), MFD_CLOEXEC);
  if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
    // The simulation's own limit, not the device's: one descriptor per live
    // chunk (sim.hpp). Said plainly rather than passed off as out of memory.
    if (!descriptor_limit_reported_) {
      descriptor_limit_reported_ = true;
      std::fprintf(stderr,
                   "sova sim: out of file descriptors after %zu live chunks (one memfd each; raise "
                   "`ulimit -n`, or use larger chunks): physical_create returns cudaErrorOperatingSystem\n",
                   chunks_.size());
    }
    return cudaErrorOperatingSystem;
  }
  if (fd < 0) return cudaErrorMemoryAllocation;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    ::close(fd);
    return cudaErrorMemoryAllocation;
  }
  chunk.fd = fd;
  const PhysicalHandle handle = next_handle_++;
  chunks_.emplace(handle, chunk);
  used += bytes;
  ++counts_.physical_creates;
  *out = handle;
  return cudaSuccess;
}

cudaError_t SimMemory::properties_at(std::uintptr_t va, PhysicalProps* out) {
  std::lock_guard lock(mu_);
  if (out == nullptr) return cudaErrorInvalidValue;
  auto next = mappings_.upper_bound(va);
  if (next == mappings_.begin()) return cudaErrorInvalidValue;
  const auto& [start, mapping] = *std::prev(next);
  if (va - start >= mapping.bytes) return cudaErrorInvalidValue;
  *out = mapping.props;
  return cudaSuccess;
}

cudaError_t SimMemory::export_fd(PhysicalHandle handle, int* fd) {
  std::lock_guard lock(mu_);
  if (fd == nullptr) return cudaErrorInvalidValue;
  auto it = chunks_.find(handle);
  if (it == chunks_.end()) return cudaErrorInvalidValue;
  if ((it->second.props.handle_types & cudaMemHandleTypePosixFileDescriptor) == 0) return cudaErrorNotSupported;
  const int copy = ::fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return cudaErrorMemoryAllocation;  // out of descriptors
  *fd = copy;
  return cudaSuccess;
}

cudaError_t SimMemory::import_fd(int fd, PhysicalHandle* out) {
  std::lock_guard lock(mu_);
  if (out == nullptr || fd < 0) return cudaErrorInvalidValue;
  PhysicalProps props;
  if (!props_of_fd(fd, &props)) return cudaErrorInvalidValue;  // closed, or not a sim chunk
  if ((props.handle_types & cudaMemHandleTypePosixFileDescriptor) == 0) return cudaErrorInvalidValue;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 || !aligned(static_cast<std::size_t>(st.st_size)))
    return cudaErrorInvalidValue;
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return cudaErrorMemoryAllocation;
  const int device =
      props.location.type == cudaMemLocationTypeDevice && valid_device(props.location.id) ? props.location.id : 0;
  const PhysicalHandle handle = next_handle_++;
  chunks_.emplace(handle, Chunk{copy, static_cast<std::size_t>(st.st_size), device, props, true});
  *out = handle;
  return cudaSuccess;
}

}  // namespace sova::sim
