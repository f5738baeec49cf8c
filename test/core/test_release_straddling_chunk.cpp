// Out of memory while the pool's own free memory would
// cover the request. The block being placed has already left the heap when
// the pool finds the device full, so a free chunk straddling the block's end
// (partly under it, partly in the free block after it) lay wholly inside no
// free block: it could be neither used whole nor released, and the request
// failed even after a device synchronize. A test file of its own: it must
// hold whatever shape the growth path takes.
#include "core/sim_pool_fixture.hpp"

#include <cstring>

using namespace sova;
using namespace sova::test;

TEST_CASE("growth releases a free chunk that straddles the block being placed", "[core][failure][issue17]") {
  const std::size_t mib = std::size_t{1} << 20;
  const Policy policy = GENERATE(Policy::default_policy, Policy::best_fit, Policy::size_classes, Policy::buddy);
  const int remap = GENERATE(0, 1, 2);  // off, balanced, thorough
  INFO("policy " << static_cast<int>(policy) << ", remap " << remap);

  SimDriver sim(small_sim(20 * mib));  // 2 MiB granules
  PoolOptions options = options_on(sim);
  options.policy = policy;
  options.remap = remap != 0;
  options.remap_effort = remap == 2 ? RemapEffort::thorough : RemapEffort::balanced;
  Pool pool(options);
  cudaStream_t s = sim.create_stream();

  // Two chunks, then both blocks freed and the first chunk released: the
  // second chunk (10 MiB) stays, free.
  void* a = pool.allocate(8 * mib, s);
  void* b = pool.allocate(10 * mib, s);
  pool.deallocate(a, s);
  pool.deallocate(b, s);
  pool.trim_to(10 * mib);
  REQUIRE(reserved_of(pool) <= 10 * mib);

  // Another pool takes 4 MiB of the device: what is left of it (6 MiB at
  // least) and the 10 MiB this pool holds free cover 12 MiB.
  Pool other(options_on(sim));
  void* taken = other.allocate(4 * mib, s);
  REQUIRE(sim.counters().physical_bytes <= 14 * mib);

  void* p = nullptr;
  const cudaError_t error = pool.try_allocate(&p, 12 * mib, s);
  INFO("reserved " << reserved_of(pool) << " B, device holds " << sim.counters().physical_bytes << " B");
  CHECK(error == cudaSuccess);
  if (error == cudaSuccess) {
    REQUIRE(p != nullptr);
    sim.stream_synchronize(s);
    std::memset(p, 0x3c, 12 * mib);  // backed: the sim faults otherwise
    pool.check_invariants();
    CHECK(pool.stats().used_current == 12 * mib);
    CHECK(sim.counters().physical_bytes <= 20 * mib);
    pool.deallocate(p, s);
  }
  pool.check_invariants();
  other.deallocate(taken, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
