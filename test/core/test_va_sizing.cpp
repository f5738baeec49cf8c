// Sizing a pool's VA range never overflows. The range is
// twice the pool's limit, and a limit beyond the device's memory is the
// device's memory (documented at PoolOptions::max_size); a va_reserve so large
// that rounding it to the granule would wrap is refused at creation with a
// clear error. Before the fix `2 * limit` and the round-up wrapped: a
// max_size of 2^63 + 2 MiB made a 4 MiB range, 2^63 and SIZE_MAX asked the
// driver to reserve 0 bytes.
#include "core/sim_pool_fixture.hpp"

#include <cstdint>
#include <cstring>
#include <string>

using namespace sova;
using namespace sova::test;

TEST_CASE("a max_size beyond the device's memory is the device's memory", "[core][limits][issue17]") {
  const std::size_t mib = std::size_t{1} << 20;
  const std::size_t max_size =
      GENERATE(std::size_t{1} << 63, (std::size_t{1} << 63) + (std::size_t{2} << 20), std::size_t{SIZE_MAX},
               std::size_t{SIZE_MAX} / 2 + 1 - 4096, std::size_t{1} << 40);
  INFO("max_size " << max_size);
  SimDriver sim(small_sim(256 * mib));
  PoolOptions options = options_on(sim);
  options.max_size = max_size;
  Pool pool(options);
  cudaStream_t s = sim.create_stream();
  void* p = nullptr;
  REQUIRE(pool.try_allocate(&p, 64 * mib, s) == cudaSuccess);
  sim.stream_synchronize(s);
  std::memset(p, 1, 64 * mib);
  // Twice the device's memory of VA: the whole device can be allocated.
  void* q = nullptr;
  CHECK(pool.try_allocate(&q, 192 * mib, s) == cudaSuccess);
  pool.check_invariants();
  CHECK(pool.contains(static_cast<char*>(p) + 256 * mib));   // the range is 512 MiB...
  CHECK(!pool.contains(static_cast<char*>(p) + 512 * mib));  // ...not more
  pool.deallocate(p, s);
  if (q != nullptr) pool.deallocate(q, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

TEST_CASE("a va_reserve that cannot be rounded to the granule is a clear error", "[core][limits][issue17]") {
  SimDriver sim(small_sim());
  const std::size_t before = sim.counters().reservations;
  PoolOptions options = options_on(sim);
  options.va_reserve =
      GENERATE(std::size_t{SIZE_MAX}, std::size_t{SIZE_MAX} - 4096, std::size_t{SIZE_MAX} - (std::size_t{2} << 20) + 2);
  INFO("va_reserve " << options.va_reserve);
  try {
    Pool pool(options);
    FAIL("a pool was made");
  } catch (const Error& error) {
    CHECK(error.error() == cudaErrorMemoryAllocation);
    const std::string what = error.what();
    INFO(what);
    CHECK(what.find(std::to_string(options.va_reserve)) != std::string::npos);  // the size asked for, not 0
  }
  CHECK(sim.counters().reservations == before);
}
