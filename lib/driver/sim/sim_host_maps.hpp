// sova sim — host memory mapped to be pinned later (host_map, host_unmap):
// real anonymous mappings (driver/host_pages.hpp, as the CUDA driver maps
// them), so that a backup's bytes are real memory the copies write, and the
// process's resident memory drops when they go.
//
// Model: a table of the live mappings; a failure point refuses the next
// n-th map as a host out of memory would (cudaErrorMemoryAllocation, or the
// error armed). An unmap must name a whole live mapping; an unmap of one
// still registered is refused here by the driver (SimDriver::host_unmap asks
// SimCopies), where a real host would keep the pages locked.
//
// Thread safety: one mutex over the table and the failure point.
#pragma once

#include "sim_failures.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>

namespace sova::sim {

class SimHostMaps {
 public:
  SimHostMaps() = default;
  /// Unmaps every mapping still live.
  ~SimHostMaps();
  SimHostMaps(const SimHostMaps&) = delete;
  SimHostMaps& operator=(const SimHostMaps&) = delete;

  cudaError_t map(std::size_t bytes, void** out);
  /// cudaErrorInvalidValue unless [ptr, ptr + bytes) is one whole mapping.
  cudaError_t unmap(void* ptr, std::size_t bytes);
  /// Whether [ptr, ptr + bytes) lies inside one live mapping.
  bool contains(const void* ptr, std::size_t bytes) const;
  void fail_map_at(int n, cudaError_t error);

  std::size_t mapped_bytes() const;
  std::size_t maps() const;    ///< maps made, ever
  std::size_t unmaps() const;  ///< unmaps made, ever

 private:
  mutable std::mutex mu_;
  std::map<const char*, std::size_t> live_;  ///< start -> bytes
  std::size_t mapped_bytes_ = 0;
  std::size_t maps_ = 0;
  std::size_t unmaps_ = 0;
  FailPoint fail_map_;
};

}  // namespace sova::sim
