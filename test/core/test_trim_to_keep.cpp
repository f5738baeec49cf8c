// trim_to(keep) leaves at most `keep` bytes reserved, as cudaMemPoolTrimTo
// does, even where only chunks larger than the excess are free: releasing a
// chunk that straddles `keep` may take the pool below it, keeping it above
// may not.
#include "core/sim_pool_fixture.hpp"

using namespace sova;
using namespace sova::test;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("trim_to leaves at most what it is asked to keep", "[core][trim]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};  // the release worker keeps out of it
  Pool pool(options);
  cudaStream_t s = sim.create_stream(false, 0);
  void* large = pool.allocate(64 * MiB, s);
  void* small = pool.allocate(2 * MiB, s);
  pool.deallocate(large, s);
  pool.deallocate(small, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);  // free and known complete
  REQUIRE(reserved_of(pool) == 66 * MiB);

  pool.trim_to(40 * MiB);
  CHECK(reserved_of(pool) <= 40 * MiB);
  pool.trim_to(10 * MiB);
  CHECK(reserved_of(pool) <= 10 * MiB);
  pool.trim_to(0);
  CHECK(reserved_of(pool) == 0);
  CHECK_NOTHROW(pool.check_invariants());
  sim.destroy_stream(s);
}

TEST_CASE("trim_to releases nothing when at most what it keeps is reserved", "[core][trim]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  cudaStream_t s = sim.create_stream(false, 0);
  void* p = pool.allocate(8 * MiB, s);
  pool.deallocate(p, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  const std::uint64_t reserved = reserved_of(pool);
  pool.trim_to(reserved);
  CHECK(reserved_of(pool) == reserved);
  sim.destroy_stream(s);
}
