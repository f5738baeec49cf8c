// Without a GPU or driver, making a pool says so in words and points to the
// host simulation (SOVA_DRIVER=sim), not only with the runtime's code
// (cudaErrorInsufficientDriver where no driver exists misleads). With a GPU
// there is nothing to check.
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <string>

TEST_CASE("cuda driver: without a GPU a pool's error says so and names SOVA_DRIVER=sim", "[cuda_driver]") {
  sova::Driver& d = sova::cuda_driver();
  int count = 0;
  if (d.device_count(&count) == cudaSuccess && count > 0) {
    SUCCEED("a GPU is present");
    return;
  }
  sova::PoolOptions options;
  options.driver = &d;
  std::string message;
  try {
    sova::Pool pool(options);
    FAIL("a pool was made without a GPU");
  } catch (const sova::Error& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("no NVIDIA driver or GPU was found") != std::string::npos);
  CHECK(message.find("SOVA_DRIVER=sim") != std::string::npos);
}
