// Sets the calling thread's simulated current device for a scope
// (SimDriver::set_current_device, which every simulation in the process
// shares, as cudaSetDevice's setting is) and puts device 0 back at its end, so
// that a test failing midway leaves the tests after it on device 0.
#pragma once

#include "support/catch.hpp"

#include <sova/sim.hpp>

namespace sova::test {

class ScopedCurrentDevice {
 public:
  ScopedCurrentDevice(SimDriver& sim, int device) : sim_(sim) {
    REQUIRE(sim_.set_current_device(device) == cudaSuccess);
  }
  ~ScopedCurrentDevice() { sim_.set_current_device(0); }
  ScopedCurrentDevice(const ScopedCurrentDevice&) = delete;
  ScopedCurrentDevice& operator=(const ScopedCurrentDevice&) = delete;

 private:
  SimDriver& sim_;
};

}  // namespace sova::test
