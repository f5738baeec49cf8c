// Pool::set_access validates the flags of every
// descriptor before anything is stored or applied. Before the fix, an empty
// pool (nothing mapped, so no driver call saw them) accepted flags that are
// none of cudaMemAccessFlags', reported them, and then every growth failed
// with cudaErrorInvalidValue when the driver was handed them.
#include "core/sim_pool_fixture.hpp"
#include "support/two_device_sim.hpp"

#include <cstring>

using namespace sova;
using namespace sova::test;

TEST_CASE("set_access refuses flags that are none of the enum's, on an empty pool", "[core][access][issue17]") {
  SimDriver sim(two_device_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();

  cudaMemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 1;
  // 2 lies within the enum's range (0..3), so C++ may hold it; the C API's
  // test (test_capi_raw_enums.cpp) passes values beyond it from C.
  desc.flags = static_cast<cudaMemAccessFlags>(2);
  CHECK(pool.set_access(&desc, 1) == cudaErrorInvalidValue);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(pool.get_access(&flags, &desc.location) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtNone);

  // Nothing was stored: growth works and the memory can be written.
  void* p = nullptr;
  REQUIRE(pool.try_allocate(&p, std::size_t{3} << 20, s) == cudaSuccess);
  sim.stream_synchronize(s);
  std::memset(p, 1, std::size_t{3} << 20);
  pool.check_invariants();

  // A batch with one bad descriptor changes nothing either.
  cudaMemAccessDesc batch[2] = {desc, desc};
  batch[0].flags = cudaMemAccessFlagsProtRead;
  CHECK(pool.set_access(batch, 2) == cudaErrorInvalidValue);
  CHECK(pool.get_access(&flags, &desc.location) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtNone);
  const SimCounters before = sim.counters();
  CHECK(pool.set_access(batch, 1) == cudaSuccess);  // the good one alone
  CHECK(sim.counters().set_access_calls > before.set_access_calls);
  CHECK(pool.get_access(&flags, &desc.location) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtRead);

  pool.deallocate(p, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
