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

inline std::uint64_t reserved_of(const Pool& pool) {
  std::uint64_t value = 0;
  REQUIRE(pool.get_attribute(cudaMemPoolAttrReservedMemCurrent, &value) == cudaSuccess);
  return value;
}

}  // namespace sova::test
