// The simulation with two devices, for the tests of what a pool does across
// devices (fences on its own device, frees on another device's stream, peer
// access): the configuration, the pool the peer-access tests grant access to,
// and what a device may do at an address as the simulation's mappings say
// (SimDriver::access_at, as cuMemGetAccess), not as the pool reports it.
#pragma once

#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <cstddef>
#include <cstdint>

namespace sova::test {

/// Two simulated devices of `total_memory` each.
inline SimConfig two_device_sim(std::size_t total_memory = std::size_t{256} << 20) {
  SimConfig config;
  config.device_count = 2;
  config.total_memory = total_memory;
  return config;
}

/// A pool on device 0 of `sim` that remaps chunks and releases none on its
/// own: every chunk a test grows stays mapped, so a grant of peer access can
/// be checked on chunks mapped before it, grown after it and moved by remapping.
inline PoolOptions peer_access_pool_options(SimDriver& sim) {
  PoolOptions options;
  options.driver = &sim;
  options.remap = true;
  options.release_threshold = ~std::uint64_t{0};
  return options;
}

/// The access `device` has to the memory mapped at `p`; the test fails where
/// nothing is mapped there.
inline cudaMemAccessFlags access_on(const SimDriver& sim, const void* p, int device) {
  // 2 lies within the enum's range (0..3) but is none of its flags: a query
  // that succeeded without writing its answer matches no expectation.
  auto flags = static_cast<cudaMemAccessFlags>(2);
  REQUIRE(sim.access_at(reinterpret_cast<std::uintptr_t>(p), device, &flags) == cudaSuccess);
  return flags;
}

}  // namespace sova::test
