// process_driver() / set_process_driver() / lock_process_driver(). The choice
// is process-wide and the lock cannot be undone, so these tests run in their
// own executable (sova_process_driver_tests), in declaration order, and the
// lock comes last. meson runs it with SOVA_DRIVER=sim.
#include "support/catch.hpp"

#include "driver/process_driver.hpp"

#include <sova/sim.hpp>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using namespace sova;

namespace {

bool env_asks_for_sim() {
  const char* v = std::getenv("SOVA_DRIVER");
  return v != nullptr && std::strcmp(v, "sim") == 0;
}

}  // namespace

TEST_CASE("process driver: first use follows SOVA_DRIVER, then stays", "[process_driver]") {
  // All threads race for the first use; all must see one and the same driver.
  std::vector<Driver*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &process_driver(); });
  }
  for (auto& t : threads) t.join();
  for (Driver* d : seen) CHECK(d == seen[0]);

  Driver& d = process_driver();
  CHECK(&d == seen[0]);
  CHECK(std::strcmp(d.name(), env_asks_for_sim() ? "sim" : "cuda") == 0);
  if (!env_asks_for_sim()) CHECK(&d == &cuda_driver());

  if (env_asks_for_sim()) {
    // The environment's sim is a working driver with the default SimConfig.
    int count = 0;
    REQUIRE(d.device_count(&count) == cudaSuccess);
    CHECK(count == SimConfig{}.device_count);
    DeviceInfo info;
    REQUIRE(d.device_info(0, &info) == cudaSuccess);
    CHECK(info.granularity == SimConfig{}.granularity);
  }
}

TEST_CASE("process driver: set_process_driver chooses another before any pool", "[process_driver]") {
  Driver& original = process_driver();
  CHECK(set_process_driver(nullptr) == cudaErrorInvalidValue);
  CHECK(&process_driver() == &original);

  static SimDriver mine;  // outlives the executable's use of it
  REQUIRE(set_process_driver(&mine) == cudaSuccess);
  CHECK(&process_driver() == &mine);
  REQUIRE(set_process_driver(&original) == cudaSuccess);
  CHECK(&process_driver() == &original);
}

TEST_CASE("process driver: locked once the C API creates a pool", "[process_driver]") {
  static SimDriver chosen;
  REQUIRE(set_process_driver(&chosen) == cudaSuccess);

  Driver& locked = detail::lock_process_driver();
  CHECK(&locked == &chosen);
  CHECK(&detail::lock_process_driver() == &chosen);  // idempotent

  CHECK(set_process_driver(&cuda_driver()) == cudaErrorInvalidValue);
  CHECK(set_process_driver(&chosen) == cudaErrorInvalidValue);
  CHECK(&process_driver() == &chosen);  // nothing changed
}
