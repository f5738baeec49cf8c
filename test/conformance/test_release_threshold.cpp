// Conformance: memory above the release threshold goes back to the device
// once the pool is idle and the frees are known complete; memory under live
// blocks or below the threshold stays.
#include "conformance/pool_fixture.hpp"

#include <thread>

using namespace sova;
using namespace sova::test;
using namespace std::chrono_literals;

namespace {

// Polls until the pool's reserved memory is `expected` or two seconds pass
// (the release worker looks every 20 ms; an idle pool is trimmed on its second look).
std::uint64_t reserved_after_idle(const Pool& pool, std::uint64_t expected) {
  std::uint64_t reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  for (int i = 0; i < 200 && reserved != expected; ++i) {
    std::this_thread::sleep_for(10ms);
    reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  }
  return reserved;
}

}  // namespace

TEST_CASE("an idle pool gives memory above the threshold back (threshold 0)", "[conformance][release]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const std::size_t mib = std::size_t{1} << 20;
  void* keep = pool.allocate(2 * mib, s);
  void* big = pool.allocate(16 * mib, s);
  pool.deallocate(big, s);  // a large free: covered by a fence at once
  device.synchronize(s);
  CHECK(reserved_after_idle(pool, 2 * mib) == 2 * mib);
  CHECK(pool.stats().chunks_unmapped >= 1);
  pool.deallocate(keep, s);
}

TEST_CASE("small frees on the legacy stream are released too", "[conformance][release]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  void* p = pool.allocate(1000, nullptr);
  pool.deallocate(p, nullptr);
  device.synchronize_device();
  CHECK(reserved_after_idle(pool, 0) == 0);
}

TEST_CASE("memory under the threshold is kept", "[conformance][release]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  std::uint64_t threshold = std::uint64_t{8} << 20;
  REQUIRE(pool.set_attribute(cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
  ScopedStream s(device);
  void* a = pool.allocate(std::size_t{6} << 20, s);
  pool.deallocate(a, s);
  device.synchronize(s);
  std::this_thread::sleep_for(100ms);  // several of the worker's looks
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == (std::uint64_t{6} << 20));
  threshold = ~std::uint64_t{0};
  REQUIRE(pool.set_attribute(cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
  void* b = pool.allocate(std::size_t{40} << 20, s);
  pool.deallocate(b, s);
  device.synchronize(s);
  std::this_thread::sleep_for(100ms);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) >= (std::uint64_t{40} << 20));
}
