// Shared helpers for the conformance suite (runs on sim and on the GPU).
#pragma once

#include "support/catch.hpp"
#include "support/test_device.hpp"

#include <sova/pool.hpp>

#include <cstdint>

namespace sova::test {

inline PoolOptions options_on(TestDevice& device) {
  PoolOptions options;
  options.driver = &device.driver();
  options.device = device.ordinal();
  return options;
}

/// A stream that is destroyed at scope exit (after the pool's work on it).
class ScopedStream {
 public:
  explicit ScopedStream(TestDevice& device) : device_(device), stream_(device.create_stream()) {}
  ~ScopedStream() {
    device_.synchronize(stream_);
    device_.destroy_stream(stream_);
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  TestDevice& device_;
  cudaStream_t stream_;
};

inline std::uint64_t attribute(const Pool& pool, cudaMemPoolAttr attr) {
  std::uint64_t value = 0;
  REQUIRE(pool.get_attribute(attr, &value) == cudaSuccess);
  return value;
}

inline bool same_figures(const PoolStats& a, const PoolStats& b) {
  return a.reserved_current == b.reserved_current && a.used_current == b.used_current &&
         a.live_blocks == b.live_blocks && a.cached_bytes == b.cached_bytes;
}

}  // namespace sova::test
