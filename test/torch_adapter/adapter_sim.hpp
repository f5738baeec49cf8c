// The simulation the adapter's tests run on: one for the process, made the
// process driver on first use (the adapter's pools and the C API take the
// process driver once, so every test file of this executable shares it).
#pragma once

#include "support/catch.hpp"

#include <sova/sim.hpp>

namespace sova::torch_adapter_test {

inline SimDriver& sim() {
  static SimDriver& driver = []() -> SimDriver& {
    SimConfig config;
    config.device_count = 1;
    auto* d = new SimDriver(config);  // leaked: the adapter's pools outlive main
    (void)set_process_driver(d);
    REQUIRE(&process_driver() == d);
    return *d;
  }();
  return driver;
}

}  // namespace sova::torch_adapter_test
