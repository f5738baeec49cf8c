// sova sim — pinned host memory and asynchronous copies (host_alloc,
// host_free, host_register_on, host_unregister, memcpy_async) and memsets
// (memset_async): what a pool's sleep and wake are made of.
//
// Model: pinned host memory is plain host memory, counted while held (a
// test sees a backup's host memory, and that it does not grow over cycles)
// and limited to SimConfig::pinned_host_memory, the host's RAM: what
// host_alloc gives and what host_register locks count against one limit,
// as both lock pages of one host. A registered range may not overlap
// another (cudaErrorHostMemoryAlreadyRegistered, as cudaHostRegister);
// a copy is a memcpy run in stream order by the stream's worker, checked as
// it runs (SimMemory::copy): it faults where a device copy would (memory
// reserved but unmapped, or mapped without access; sim_faults.hpp) and sees
// the contents the work before it left. A memset is a std::memset run and
// checked the same way (the write side only). A copy delay set by the test keeps
// the stream busy before each copy (a slow link).
//
// Thread safety: one mutex over the table and the failure points.
#pragma once

#include "sim_failures.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>

namespace sova::sim {

class SimCopies {
 public:
  /// `limit`: the pinned host memory held at most (0: no limit).
  explicit SimCopies(std::size_t limit) noexcept : limit_(limit) {}
  /// Frees every host allocation still held.
  ~SimCopies();
  SimCopies(const SimCopies&) = delete;
  SimCopies& operator=(const SimCopies&) = delete;

  /// cudaErrorMemoryAllocation beyond the limit.
  cudaError_t host_alloc(std::size_t bytes, void** out);
  /// cudaErrorInvalidValue for a pointer host_alloc did not give.
  cudaError_t host_free(void* ptr);
  /// Locks [ptr, ptr + bytes) (the caller checked it is mapped):
  /// cudaErrorMemoryAllocation beyond the limit,
  /// cudaErrorHostMemoryAlreadyRegistered where it overlaps a registered range.
  cudaError_t host_register(void* ptr, std::size_t bytes);
  /// cudaErrorHostMemoryNotRegistered for a pointer host_register did not lock.
  cudaError_t host_unregister(void* ptr);
  /// Whether any registered range overlaps [ptr, ptr + bytes).
  bool registered_within(const void* ptr, std::size_t bytes) const;
  /// The failure point of memcpy_async, fired before it enqueues anything;
  /// counts the copy when it does not fire, and says how long the stream
  /// stays busy before it (`*delay`).
  cudaError_t before_copy(std::size_t bytes, std::chrono::microseconds* delay);
  /// The failure point of memset_async, fired before it enqueues anything;
  /// counts the memset (of more than 0 bytes) when it does not fire. Memsets share the copies'
  /// delay (`*delay`).
  cudaError_t before_memset(std::size_t bytes, std::chrono::microseconds* delay);
  void delay_copies(std::chrono::microseconds duration);
  /// Every host_alloc and host_register takes `duration` (pinning's time).
  void delay_host_pins(std::chrono::microseconds duration);

  void fail_host_alloc_at(int n, cudaError_t error);
  void fail_host_register_at(int n, cudaError_t error);
  void fail_copy_at(int n, cudaError_t error);
  void fail_memset_at(int n, cudaError_t error);

  std::size_t host_bytes() const;
  std::size_t host_alloc_calls() const;
  std::size_t host_allocs() const;
  std::size_t host_register_calls() const;
  std::size_t host_registers() const;
  std::size_t copies() const;
  std::size_t bytes_copied() const;
  std::size_t memsets() const;
  std::size_t bytes_set() const;

 private:
  const std::size_t limit_;
  mutable std::mutex mu_;
  /// Waits out the pin delay, outside the lock (counted first, by `calls`).
  void pin_delay(std::size_t& calls);

  std::unordered_map<void*, std::size_t> held_;
  std::map<const char*, std::size_t> registered_;  ///< start -> bytes
  std::size_t host_bytes_ = 0;
  std::size_t host_alloc_calls_ = 0;
  std::size_t host_allocs_ = 0;
  std::size_t host_register_calls_ = 0;
  std::size_t host_registers_ = 0;
  std::size_t copies_ = 0;
  std::size_t bytes_copied_ = 0;
  std::size_t memsets_ = 0;
  std::size_t bytes_set_ = 0;
  std::chrono::microseconds delay_{0};
  std::chrono::microseconds pin_delay_{0};
  FailPoint fail_alloc_, fail_register_, fail_copy_, fail_memset_;
};

}  // namespace sova::sim
