// Conformance: allocation, freeing, statistics and bad input, on either driver.
#include "conformance/pool_fixture.hpp"

#include <cstring>
#include <string>

using namespace sova;
using namespace sova::test;

TEST_CASE("a freed block is reused at once on the same stream", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* a = pool.allocate(1000, s);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 512 == 0);
  pool.deallocate(a, s);
  void* b = pool.allocate(1000, s);
  CHECK(b == a);
  CHECK(pool.stats().fast_path_hits == 1);
  pool.deallocate(b, s);
  pool.check_invariants();
}

TEST_CASE("blocks hold their data and never overlap", "[conformance]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const std::size_t sizes[] = {512, 1000, 4096, 70000, 1 << 20, 3 << 20, 513};
  void* blocks[7];
  for (int i = 0; i < 7; ++i) {
    blocks[i] = pool.allocate(sizes[i], s);
    device.fill(blocks[i], sizes[i] / 4 * 4, 0xA0000000u + i, s);
  }
  for (int i = 0; i < 7; ++i) device.expect(blocks[i], sizes[i] / 4 * 4, 0xA0000000u + i, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  for (void* b : blocks) pool.deallocate(b, s);
  pool.check_invariants();
}

TEST_CASE("size zero gives NULL and success, as cudaMallocAsync does", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  void* p = reinterpret_cast<void*>(0x1234);
  CHECK(pool.try_allocate(&p, 0, nullptr) == cudaSuccess);
  CHECK(p == nullptr);
  CHECK(pool.allocate(0, nullptr) == nullptr);
  CHECK(pool.try_allocate(nullptr, 16, nullptr) == cudaErrorInvalidValue);
  CHECK(pool.stats().reserved_current == 0);
}

TEST_CASE("used counts requested bytes and drops at the free; reserved is whole granules", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* one = pool.allocate(1, s);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 1);
  void* more = pool.allocate(3000, s);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 3001);
  DeviceInfo info;
  REQUIRE(device.driver().device_info(0, &info) == cudaSuccess);
  const std::uint64_t reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(reserved == info.granularity);
  pool.deallocate(one, s);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 3000);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemHigh) == 3001);
  pool.deallocate(more, s);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemHigh) == reserved);
}

TEST_CASE("requests beyond the device or the pool's maximum fail and change nothing", "[conformance]") {
  TestDevice& device = test_device();
  DeviceInfo info;
  REQUIRE(device.driver().device_info(0, &info) == cudaSuccess);
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* keep = pool.allocate(4096, s);
  const PoolStats before = pool.stats();

  SECTION("2^50 bytes") {
    void* p = reinterpret_cast<void*>(0x1234);
    CHECK(pool.try_allocate(&p, std::size_t{1} << 50, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    try {
      pool.allocate(std::size_t{1} << 50, s);
      FAIL("allocate did not throw");
    } catch (const std::bad_alloc& e) {  // OutOfMemory derives from it
      CHECK(std::string(e.what()).find("1125899906842624") != std::string::npos);
    }
  }
  SECTION("more than the device has") {
    void* p = nullptr;
    CHECK(pool.try_allocate(&p, info.total_memory + (std::size_t{1} << 20), s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
  }
  const PoolStats after = pool.stats();
  CHECK(same_figures(before, after));
  CHECK(after.failed_allocations >= 1);
  pool.check_invariants();
  void* again = pool.allocate(4096, s);  // still works
  CHECK(again != nullptr);
  pool.deallocate(again, s);
  pool.deallocate(keep, s);
}

TEST_CASE("a pool's maximum size caps reserved memory", "[conformance]") {
  TestDevice& device = test_device();
  PoolOptions options = options_on(device);
  options.max_size = std::size_t{64} << 20;
  Pool pool(options);
  ScopedStream s(device);
  void* a = pool.allocate(std::size_t{32} << 20, s);
  void* b = nullptr;
  CHECK(pool.try_allocate(&b, std::size_t{48} << 20, s) == cudaErrorMemoryAllocation);
  CHECK(pool.try_allocate(&b, std::size_t{65} << 20, s) == cudaErrorMemoryAllocation);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == (std::size_t{32} << 20));
  void* c = pool.allocate(std::size_t{16} << 20, s);
  CHECK(c != nullptr);
  pool.check_invariants();
  pool.deallocate(a, s);
  pool.deallocate(c, s);
  // Freed memory is reused for a request that would not fit beside it.
  void* d = pool.allocate(std::size_t{60} << 20, s);
  CHECK(d != nullptr);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) <= (std::size_t{64} << 20));
  pool.deallocate(d, s);
  pool.check_invariants();
}

TEST_CASE("bad frees are refused and change nothing", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  Pool other(options_on(device));
  ScopedStream s(device);
  void* live = pool.allocate(4096, s);
  void* foreign = other.allocate(4096, s);
  const PoolStats before = pool.stats();
  int on_host = 0;

  CHECK(pool.try_deallocate(nullptr, s) == cudaSuccess);
  CHECK(pool.try_deallocate(&on_host, s) == cudaErrorInvalidValue);
  CHECK(pool.try_deallocate(static_cast<char*>(live) + 512, s) == cudaErrorInvalidValue);
  CHECK(pool.try_deallocate(static_cast<char*>(live) + 1, s) == cudaErrorInvalidValue);
  CHECK(pool.try_deallocate(foreign, s) == cudaErrorInvalidValue);
  CHECK_THROWS_AS(pool.deallocate(&on_host, s), sova::Error);
  CHECK(same_figures(before, pool.stats()));
  pool.check_invariants();

  pool.deallocate(live, s);
  CHECK(pool.try_deallocate(live, s) == cudaErrorInvalidValue);  // double free
  const PoolStats freed = pool.stats();
  CHECK(freed.used_current == 0);
  CHECK(freed.deallocations == 1);
  pool.check_invariants();
  other.deallocate(foreign, s);
}

TEST_CASE("attributes behave as cudaMemPoolSetAttribute / GetAttribute", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  std::uint64_t threshold = 12345;
  CHECK(pool.set_attribute(cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
  CHECK(attribute(pool, cudaMemPoolAttrReleaseThreshold) == 12345);
  int flag = 7;
  CHECK(pool.set_attribute(cudaMemPoolReuseAllowOpportunistic, &flag) == cudaSuccess);
  flag = -1;
  CHECK(pool.get_attribute(cudaMemPoolReuseAllowOpportunistic, &flag) == cudaSuccess);
  CHECK(flag == 1);
  flag = 0;
  CHECK(pool.set_attribute(cudaMemPoolReuseAllowInternalDependencies, &flag) == cudaSuccess);
  CHECK(pool.get_attribute(cudaMemPoolReuseAllowInternalDependencies, &flag) == cudaSuccess);
  CHECK(flag == 0);
  std::uint64_t value = 5;
  CHECK(pool.set_attribute(cudaMemPoolAttrUsedMemHigh, &value) == cudaErrorInvalidValue);
  CHECK(pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &value) == cudaErrorInvalidValue);
  value = 0;
  CHECK(pool.set_attribute(cudaMemPoolAttrReservedMemCurrent, &value) == cudaErrorInvalidValue);
  CHECK(pool.set_attribute(cudaMemPoolAttrUsedMemCurrent, &value) == cudaErrorInvalidValue);
  CHECK(pool.set_attribute(static_cast<cudaMemPoolAttr>(999), &value) == cudaErrorInvalidValue);
  CHECK(pool.get_attribute(static_cast<cudaMemPoolAttr>(999), &value) == cudaErrorInvalidValue);
  CHECK(pool.get_attribute(cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
  CHECK(pool.set_attribute(cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("resetting the high-water marks brings them to the current figures", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* big = pool.allocate(std::size_t{8} << 20, s);
  void* small = pool.allocate(1024, s);
  pool.deallocate(big, s);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemHigh) == (std::size_t{8} << 20) + 1024);
  std::uint64_t zero = 0;
  REQUIRE(pool.set_attribute(cudaMemPoolAttrUsedMemHigh, &zero) == cudaSuccess);
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemHigh) == 1024);
  pool.trim_to(0);
  REQUIRE(pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &zero) == cudaSuccess);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemHigh) == attribute(pool, cudaMemPoolAttrReservedMemCurrent));
  pool.deallocate(small, s);
}

TEST_CASE("trim releases cached memory but never memory under live blocks", "[conformance]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream s(device);
  const std::size_t mib = std::size_t{1} << 20;
  void* a = pool.allocate(8 * mib, s);
  void* b = pool.allocate(8 * mib, s);
  void* c = pool.allocate(8 * mib, s);
  device.fill(b, 8 * mib, 0xB0B0B0B0u, s);
  pool.deallocate(a, s);
  pool.deallocate(c, s);
  pool.trim_to(0);
  const std::uint64_t reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  CHECK(reserved >= 8 * mib);
  CHECK(reserved < 24 * mib);
  device.expect(b, 8 * mib, 0xB0B0B0B0u, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  pool.deallocate(b, s);
  device.synchronize(s);
  pool.trim_to(0);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == 0);
  CHECK(pool.stats().chunks_unmapped >= 1);
  pool.check_invariants();
}

TEST_CASE("frees on one stream coalesce into a larger block without growing", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  // 2 MiB parts: the default policy keeps blocks of 1 MiB and less in a
  // region of their own, where a 4-part block would not go.
  const std::size_t part = std::size_t{2} << 20;
  void* parts[4];
  for (void*& p : parts) p = pool.allocate(part, s);
  const std::uint64_t reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  for (void* p : parts) pool.deallocate(p, s);
  void* whole = pool.allocate(4 * part, s);
  CHECK(whole == parts[0]);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == reserved);
  pool.deallocate(whole, s);
  pool.check_invariants();
}
