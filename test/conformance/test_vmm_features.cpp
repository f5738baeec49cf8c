// The VMM features (docs/vmm.md) on the simulation and on the GPU alike: aliases,
// growable buffers, compressible and host memory pools, the property query.
// Work is stream-ordered (TestDevice fill/expect are kernels on the GPU).
#include "conformance/peer_process.hpp"
#include "conformance/pool_fixture.hpp"

#include <sova/alias.hpp>
#include <sova/growable.hpp>
#include <sova/pool.hpp>

#include <cstring>
#include <string>

#include <unistd.h>

using namespace sova;
using namespace sova::test;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;

DeviceInfo info_of(TestDevice& device) {
  DeviceInfo info;
  REQUIRE(device.driver().device_info(0, &info) == cudaSuccess);
  return info;
}
}  // namespace

TEST_CASE("alias: written through one address, read through the other, in stream order", "[vmm][alias]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream s(device);
  void* before = pool.allocate(3 * kMiB, s);  // so that the block does not start a chunk
  void* p = pool.allocate(40 * kMiB, s);      // and spans chunks
  {
    BlockAlias alias(pool, p);
    REQUIRE(alias.data() != p);
    CHECK(alias.size() == 40 * kMiB);
    device.reset_mismatches();
    device.fill(alias.data(), 40 * kMiB, 0x0A11A5ED, s);  // one kernel writes through the alias
    device.expect(p, 40 * kMiB, 0x0A11A5ED, s);           // a later one reads through the block
    device.fill(p, 40 * kMiB, 0xB10CB10C, s);
    device.expect(alias.data(), 40 * kMiB, 0xB10CB10C, s);
    device.synchronize(s);
    CHECK(device.mismatches() == 0);
  }  // the alias goes before the block is freed
  // Bad input: interior pointers, freed blocks, foreign addresses, bad flags.
  CHECK_THROWS_AS(BlockAlias(pool, static_cast<char*>(p) + 512), Error);
  CHECK_THROWS_AS(BlockAlias(pool, p, cudaMemAccessFlagsProtNone), Error);
  pool.deallocate(p, s);
  CHECK_THROWS_AS(BlockAlias(pool, p), Error);
  pool.deallocate(before, s);
  pool.check_invariants();
}

TEST_CASE("growable: device work keeps its data across growth, the address never changes", "[vmm][growable]") {
  TestDevice& device = test_device();
  GrowableOptions options;
  options.driver = &device.driver();
  options.device = device.ordinal();
  options.max_chunk = 16 * kMiB;
  GrowableBuffer buffer(512 * kMiB, options);
  ScopedStream s(device);
  char* p = static_cast<char*>(buffer.data());
  std::size_t size = 0;
  device.reset_mismatches();
  for (std::size_t next : {kMiB, 5 * kMiB, 37 * kMiB, 100 * kMiB, 300 * kMiB}) {
    REQUIRE(buffer.resize(next, s) == cudaSuccess);
    CHECK(buffer.data() == static_cast<void*>(p));  // void*: Catch prints a char* as a string, reading device memory
    device.fill(p + size, next - size, static_cast<std::uint32_t>(next), s);
    for (std::size_t earlier : {kMiB, 5 * kMiB, 37 * kMiB, 100 * kMiB}) {
      if (earlier < next) device.expect(p + earlier - 4, 4, static_cast<std::uint32_t>(earlier), s);
    }
    size = next;
  }
  device.expect(p + 100 * kMiB, 200 * kMiB, static_cast<std::uint32_t>(300 * kMiB), s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  CHECK(buffer.physical_bytes() == 300 * kMiB);
  REQUIRE(buffer.resize(10 * kMiB, s) == cudaSuccess);  // shrinking waits for s, then releases
  CHECK(buffer.physical_bytes() <= 10 * kMiB + 16 * kMiB);
  device.reset_mismatches();
  device.expect(p, 4, static_cast<std::uint32_t>(kMiB), s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  CHECK(buffer.resize(512 * kMiB + 1, s) == cudaErrorInvalidValue);
  CHECK(buffer.size() == 10 * kMiB);
}

TEST_CASE("compression: granted and reported where the device has it, refused where not", "[vmm][compression]") {
  TestDevice& device = test_device();
  const DeviceInfo info = info_of(device);
  PoolOptions options = options_on(device);
  options.compressible = true;
  if (!info.compression_supported) {
    CHECK_THROWS_AS(Pool(options), Error);
    return;
  }
  Pool pool(options);
  ScopedStream s(device);
  void* p = pool.allocate(8 * kMiB, s);
  PhysicalProps props;
  REQUIRE(pool.properties(p, &props) == cudaSuccess);
  CHECK(props.compressible);
  device.reset_mismatches();
  device.fill(p, 8 * kMiB, 0, s);  // compressible data, read back
  device.expect(p, 8 * kMiB, 0, s);
  device.fill(p, 8 * kMiB, 0x12345678, s);
  device.expect(p, 8 * kMiB, 0x12345678, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.deallocate(p, s);
  Pool plain(options_on(device));
  void* q = plain.allocate(kMiB, s);
  REQUIRE(plain.properties(q, &props) == cudaSuccess);
  CHECK_FALSE(props.compressible);
  plain.deallocate(q, s);
}

TEST_CASE("host pool: pinned host memory the device writes and reads in stream order", "[vmm][host_pool]") {
  TestDevice& device = test_device();
  const DeviceInfo info = info_of(device);
  PoolOptions options = options_on(device);
  options.host_numa_node = info.host_numa_id >= 0 ? info.host_numa_id : 0;
  if (!info.host_numa_vmm_supported) {
    CHECK_THROWS_AS(Pool(options), Error);
    return;
  }
  Pool pool(options);
  ScopedStream s(device);
  void* p = pool.allocate(6 * kMiB, s);
  PhysicalProps props;
  REQUIRE(pool.properties(p, &props) == cudaSuccess);
  CHECK(props.location.type == cudaMemLocationTypeHostNuma);
  CHECK(props.location.id == options.host_numa_node);
  device.reset_mismatches();
  device.fill(p, 6 * kMiB, 0x40570001, s);
  device.expect(p, 6 * kMiB, 0x40570001, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  // The host reads it directly (host memory): in a peer process on the GPU,
  // so that a fault there cannot take this binary down.
  std::uint32_t first = 0;
  if (std::string(device.name()) == "sim") {
    std::memcpy(&first, p, sizeof first);
    CHECK(first == 0x40570001);
  }
  pool.deallocate(p, s);
}

TEST_CASE("host pool peer: the host reads and writes host-pool memory", "[.peer]") {
  REQUIRE(peer_socket() >= 0);
  TestDevice& device = test_device();
  const DeviceInfo info = info_of(device);
  REQUIRE(info.host_numa_vmm_supported);
  PoolOptions options = options_on(device);
  options.host_numa_node = info.host_numa_id >= 0 ? info.host_numa_id : 0;
  Pool pool(options);
  ScopedStream s(device);
  auto* p = static_cast<std::uint32_t*>(pool.allocate(4 * kMiB, s));
  device.fill(p, 4 * kMiB, 0x40570002, s);
  device.synchronize(s);
  CHECK(p[0] == 0x40570002);  // the host reads what the device wrote
  CHECK(p[kMiB - 1] == 0x40570002);
  for (std::size_t i = 0; i < kMiB; ++i) p[i] = 0x40570003;  // and writes
  device.reset_mismatches();
  device.expect(p, 4 * kMiB, 0x40570003, s);  // which the device reads
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.deallocate(p, s);
  const char done = 1;
  REQUIRE(::write(peer_socket(), &done, 1) == 1);  // the test ran here, to its end
}

TEST_CASE("host pool: the host's own access, checked in a peer process", "[vmm][host_pool]") {
  TestDevice& device = test_device();
  if (!info_of(device).host_numa_vmm_supported) return;  // refused above, and tested there
  PeerProcess peer("host pool peer: the host reads and writes host-pool memory");
  char done = 0;
  CHECK(::read(peer.socket(), &done, 1) == 1);
  CHECK(done == 1);
  CHECK(peer.wait() == 0);
}
