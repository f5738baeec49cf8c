// Helpers for pool tests that need the simulation's own controls (failure
// injection, counters): each test gets its own SimDriver.
#pragma once

#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <cstdint>

namespace sova::test {

inline SimConfig small_sim(std::size_t total_memory = std::size_t{256} << 20) {
  SimConfig config;
  config.total_memory = total_memory;
  return config;
}

inline PoolOptions options_on(SimDriver& sim) {
  PoolOptions options;
  options.driver = &sim;
  return options;
}

/// What the simulation says of `s`'s capture (status, id, graph).
inline CaptureInfo capture_info(SimDriver& sim, cudaStream_t s) {
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  return info;
}

inline std::uint64_t reserved_of(const Pool& pool) {
  std::uint64_t value = 0;
  REQUIRE(pool.get_attribute(cudaMemPoolAttrReservedMemCurrent, &value) == cudaSuccess);
  return value;
}

}  // namespace sova::test
