// Peer access to a pool's memory (sovaMemPoolSetAccess / sova::Pool::set_access)
// on real GPUs: none before it is granted, as with the runtime's pools;
// read-only and read-write grants that cover every mapping the pool makes
// later (growth, remapping, moves back to ghost mappings); revoked again.
// What a device may do is read from the driver (cuMemGetAccess on each
// block), not from the pool's bookkeeping; a kernel of the other device then
// reads or writes where the grant allows. No test makes a kernel touch
// memory it may not: that faults the GPU context rather than failing a check.
#include "multigpu/require_devices.hpp"

#include <sova/pool.hpp>
#include <sova/sova.h>

#include <array>
#include <cstring>
#include <limits>

using namespace sova::multigpu;

namespace {

cudaMemLocation device_location(int device) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = device;
  return l;
}

sova::PoolOptions pool_on(int device, bool remap) {
  sova::PoolOptions o;
  o.device = device;
  o.remap = remap;
  o.release_threshold = std::numeric_limits<std::uint64_t>::max();  // nothing released meanwhile
  return o;
}

cudaMemAccessFlags pool_access(const sova::Pool& pool, int device) {
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtReadWrite;
  const cudaMemLocation l = device_location(device);
  REQUIRE(pool.get_access(&flags, &l) == cudaSuccess);
  return flags;
}

}  // namespace

TEST_CASE("multigpu: no peer access before it is granted, as the runtime's pools report", "[multigpu][access]") {
  SOVA_REQUIRE_DEVICES(2);
  // The runtime's pool of device 1, for comparison.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location = device_location(1);
  cudaMemPool_t runtime_pool = nullptr;
  REQUIRE(cudaMemPoolCreate(&runtime_pool, &props) == cudaSuccess);
  cudaMemLocation l0 = device_location(0), l1 = device_location(1);
  cudaMemAccessFlags runtime0 = cudaMemAccessFlagsProtReadWrite, runtime1 = cudaMemAccessFlagsProtNone;
  REQUIRE(cudaMemPoolGetAccess(&runtime0, runtime_pool, &l0) == cudaSuccess);
  REQUIRE(cudaMemPoolGetAccess(&runtime1, runtime_pool, &l1) == cudaSuccess);
  CHECK(runtime0 == cudaMemAccessFlagsProtNone);
  CHECK(runtime1 == cudaMemAccessFlagsProtReadWrite);

  sovaMemPoolProps sprops;
  std::memset(&sprops, 0, sizeof sprops);
  sprops.device = 1;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &sprops) == cudaSuccess);
  cudaMemAccessFlags sova0 = cudaMemAccessFlagsProtReadWrite, sova1 = cudaMemAccessFlagsProtNone;
  REQUIRE(sovaMemPoolGetAccess(&sova0, pool, &l0) == cudaSuccess);
  REQUIRE(sovaMemPoolGetAccess(&sova1, pool, &l1) == cudaSuccess);
  CHECK(sova0 == runtime0);
  CHECK(sova1 == runtime1);

  DeviceStream s1(1);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4 * kMiB, pool, s1) == cudaSuccess);
  CHECK(mapped_access(p, 1) == cudaMemAccessFlagsProtReadWrite);
  CHECK(mapped_access(p, 0) == cudaMemAccessFlagsProtNone);  // the driver agrees: not mapped for device 0
  // Revoking the pool's own device is refused, as the runtime refuses it.
  const cudaMemAccessDesc none1 = access_desc(1, cudaMemAccessFlagsProtNone);
  CHECK(sovaMemPoolSetAccess(pool, &none1, 1) == cudaErrorInvalidDevice);
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // sova's refusal leaves the runtime's last error alone
  CHECK(cudaMemPoolSetAccess(runtime_pool, &none1, 1) == cudaErrorInvalidDevice);
  // The runtime's refusal stays as this thread's last error until read: read
  // it here, or the next check of a kernel launch would report it.
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  const cudaMemAccessDesc bad = access_desc(device_count(), cudaMemAccessFlagsProtRead);
  CHECK(sovaMemPoolSetAccess(pool, &bad, 1) == cudaErrorInvalidDevice);
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(mapped_access(p, 1) == cudaMemAccessFlagsProtReadWrite);
  REQUIRE(sovaFreeAsync(p, s1) == cudaSuccess);
  s1.synchronize();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  REQUIRE(cudaMemPoolDestroy(runtime_pool) == cudaSuccess);
}

TEST_CASE("multigpu: read-only and read-write grants cover blocks mapped before and after, and are revoked",
          "[multigpu][access]") {
  SOVA_REQUIRE_DEVICES(2);
  sova::Pool pool(pool_on(1, false));
  DeviceStream s0(0), s1(1);
  void* early = pool.allocate(64 * kMiB, s1);
  fill(early, 64 * kMiB, 0xEA21'0001u, s1);
  s1.synchronize();
  CHECK(pool_access(pool, 0) == cudaMemAccessFlagsProtNone);
  CHECK(mapped_access(early, 0) == cudaMemAccessFlagsProtNone);

  SECTION("read-only") {
    const cudaMemAccessDesc ro = access_desc(0, cudaMemAccessFlagsProtRead);
    REQUIRE(pool.set_access(&ro, 1) == cudaSuccess);
    CHECK(pool_access(pool, 0) == cudaMemAccessFlagsProtRead);
    CHECK(mapped_access(early, 0) == cudaMemAccessFlagsProtRead);
    // Growth after the grant: 2 GiB more, new chunks, mapped read-only for device 0 too.
    void* late = pool.allocate(2 * kGiB, s1);
    fill(late, 2 * kGiB, 0x1A7E'0002u, s1);
    s1.synchronize();
    CHECK(mapped_access(late, 0) == cudaMemAccessFlagsProtRead);
    CHECK(mapped_access(static_cast<char*>(late) + 2 * kGiB - 4096, 0) == cudaMemAccessFlagsProtRead);
    CHECK(mapped_access(late, 1) == cudaMemAccessFlagsProtReadWrite);
    // Device 0 reads both.
    CHECK(count_wrong(early, 64 * kMiB, 0xEA21'0001u, s0) == 0);
    CHECK(count_wrong(late, 2 * kGiB, 0x1A7E'0002u, s0) == 0);
    pool.deallocate(late, s1);
  }
  SECTION("read-write, then revoked") {
    const cudaMemAccessDesc rw = access_desc(0, cudaMemAccessFlagsProtReadWrite);
    REQUIRE(pool.set_access(&rw, 1) == cudaSuccess);
    CHECK(pool_access(pool, 0) == cudaMemAccessFlagsProtReadWrite);
    void* late = pool.allocate(2 * kGiB, s1);
    CHECK(mapped_access(early, 0) == cudaMemAccessFlagsProtReadWrite);
    CHECK(mapped_access(late, 0) == cudaMemAccessFlagsProtReadWrite);
    // Device 0 writes, device 1 reads what it wrote (ordered by the synchronize).
    fill(late, 2 * kGiB, 0x0DE0'0003u, s0);
    fill(early, 64 * kMiB, 0x0DE0'0004u, s0);
    s0.synchronize();
    CHECK(count_wrong(late, 2 * kGiB, 0x0DE0'0003u, s1) == 0);
    CHECK(count_wrong(early, 64 * kMiB, 0x0DE0'0004u, s1) == 0);

    const cudaMemAccessDesc none = access_desc(0, cudaMemAccessFlagsProtNone);
    REQUIRE(pool.set_access(&none, 1) == cudaSuccess);
    CHECK(pool_access(pool, 0) == cudaMemAccessFlagsProtNone);
    CHECK(mapped_access(early, 0) == cudaMemAccessFlagsProtNone);
    CHECK(mapped_access(late, 0) == cudaMemAccessFlagsProtNone);
    void* after = pool.allocate(1 * kGiB, s1);  // grown after the revoke: not mapped for device 0
    CHECK(mapped_access(after, 0) == cudaMemAccessFlagsProtNone);
    CHECK(mapped_access(after, 1) == cudaMemAccessFlagsProtReadWrite);
    // Device 1 still has its data.
    CHECK(count_wrong(late, 2 * kGiB, 0x0DE0'0003u, s1) == 0);
    pool.deallocate(after, s1);
    pool.deallocate(late, s1);
  }
  pool.deallocate(early, s1);
  s1.synchronize();
}

TEST_CASE("multigpu: a grant covers chunks moved by remapping and moved back to their ghost mappings",
          "[multigpu][access][remap]") {
  // The recipe of the conformance test "a chunk that moves back to where it
  // was moves without a new mapping" (test/conformance/test_remap.cpp), on a
  // pool of device 1 that granted device 0 read-write first: every address
  // remapping makes (a chunk under a new block, a ghost mapping reused) must
  // be mapped for device 0 too, and device 0's writes land where device 1 reads.
  SOVA_REQUIRE_DEVICES(2);
  sova::Pool pool(pool_on(1, true));
  const cudaMemAccessDesc rw = access_desc(0, cudaMemAccessFlagsProtReadWrite);
  REQUIRE(pool.set_access(&rw, 1) == cudaSuccess);
  DeviceStream s0(0), s1(1);
  constexpr std::size_t kBlock = 32 * kMiB;  // a chunk each
  std::array<void*, 8> blocks{};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i] = pool.allocate(kBlock, s1);
    fill(blocks[i], kBlock, 0x6057'0000u + static_cast<std::uint32_t>(i), s1);
  }
  for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s1);
  s1.synchronize();
  pool.stream_synchronized(s1);

  void* big = pool.allocate(4 * kBlock, s1);  // the four free chunks, moved under new VA
  sova::PoolStats stats = pool.stats();
  REQUIRE(stats.chunks_remapped == 4);
  CHECK(stats.ghost_mappings == 4);
  for (std::size_t off = 0; off < 4 * kBlock; off += kBlock) {
    CHECK(mapped_access(static_cast<char*>(big) + off, 0) == cudaMemAccessFlagsProtReadWrite);
  }
  s1.synchronize();
  fill(big, 4 * kBlock, 0xB16B'0000u, s0);
  s0.synchronize();
  CHECK(count_wrong(big, 4 * kBlock, 0xB16B'0000u, s1) == 0);
  pool.deallocate(big, s1);
  s1.synchronize();
  pool.stream_synchronized(s1);

  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    void* again = pool.allocate(kBlock, s1);
    CHECK(again == blocks[i]);
    blocks[i] = again;
  }
  stats = pool.stats();
  CHECK(stats.remaps_to_ghosts == 4);
  s1.synchronize();
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    CHECK(mapped_access(blocks[i], 0) == cudaMemAccessFlagsProtReadWrite);
    fill(blocks[i], kBlock, 0x6A1E'0000u + static_cast<std::uint32_t>(i), s0);
  }
  s0.synchronize();
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    INFO("block " << i);
    const std::uint32_t tag = (i % 2 == 0 ? 0x6A1E'0000u : 0x6057'0000u) + static_cast<std::uint32_t>(i);
    CHECK(count_wrong(blocks[i], kBlock, tag, s1) == 0);
    CHECK(count_wrong(blocks[i], kBlock, tag, s0) == 0);
  }
  // Revoked: every mapping, ghosts' included, loses device 0.
  const cudaMemAccessDesc none = access_desc(0, cudaMemAccessFlagsProtNone);
  REQUIRE(pool.set_access(&none, 1) == cudaSuccess);
  for (void* p : blocks) CHECK(mapped_access(p, 0) == cudaMemAccessFlagsProtNone);
  for (void* p : blocks) pool.deallocate(p, s1);
  s1.synchronize();
  pool.trim_to(0);
  CHECK(pool.stats().reserved_current == 0);
}
