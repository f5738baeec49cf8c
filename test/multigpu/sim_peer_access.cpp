// The multigpu suite's peer-access rules on the simulation with two devices
// (runs in CI, suite sim): a read-only grant covers the chunks mapped before
// it, those grown after it, those moved by remapping and those moved back to
// their ghost mappings; revoking and granting again reach every mapping.
// What a device may do is asked of the simulation's mappings
// (SimDriver::access_at, as cuMemGetAccess), not of the pool.
#include "support/access_desc.hpp"
#include "support/two_device_sim.hpp"

#include <cstdint>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr std::size_t kBlock = 32 * MiB;  // a chunk each, as test/conformance/test_remap.cpp's ghost test

}  // namespace

TEST_CASE(
    "multigpu on the simulation: a read-only grant covers growth, remapping and ghosts; revoked and granted again",
    "[core][devices][access]") {
  SimDriver sim(two_device_sim(std::size_t{1} << 30));
  Pool pool(peer_access_pool_options(sim));
  cudaStream_t s = sim.create_stream(false, 0);
  auto access = [&](const void* p, int device) { return access_on(sim, p, device); };
  auto all_have = [&](const std::vector<void*>& blocks, int device, cudaMemAccessFlags want) {
    for (const void* p : blocks) {
      if (access(p, device) != want) return false;
    }
    return true;
  };

  std::vector<void*> blocks{pool.allocate(kBlock, s)};  // mapped before the grant
  CHECK(access(blocks[0], 1) == cudaMemAccessFlagsProtNone);
  const cudaMemAccessDesc read_only = access_desc(1, cudaMemAccessFlagsProtRead);
  REQUIRE(pool.set_access(&read_only, 1) == cudaSuccess);
  CHECK(access(blocks[0], 1) == cudaMemAccessFlagsProtRead);
  CHECK(access(blocks[0], 0) == cudaMemAccessFlagsProtReadWrite);

  // Growth: seven more blocks, a chunk each.
  for (int i = 0; i < 7; ++i) blocks.push_back(pool.allocate(kBlock, s));
  CHECK(all_have(blocks, 1, cudaMemAccessFlagsProtRead));
  CHECK(all_have(blocks, 0, cudaMemAccessFlagsProtReadWrite));

  // Remapping: the even blocks' chunks moved under a request of four.
  for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  void* big = pool.allocate(4 * kBlock, s);
  REQUIRE(pool.stats().chunks_remapped == 4);
  for (std::size_t offset = 0; offset < 4 * kBlock; offset += kBlock) {
    CHECK(access(static_cast<char*>(big) + offset, 1) == cudaMemAccessFlagsProtRead);
  }

  // Moves back: freed, the chunks return to the holes they left, where their
  // ghost mappings still are, with the grant they were mapped with.
  pool.deallocate(big, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    void* again = pool.allocate(kBlock, s);
    CHECK(again == blocks[i]);  // best fit: the hole it left
    blocks[i] = again;
  }
  CHECK(pool.stats().remaps_to_ghosts == 4);
  CHECK(all_have(blocks, 1, cudaMemAccessFlagsProtRead));

  // Revoked: every block, moved ones included; then read-write for all.
  const cudaMemAccessDesc none = access_desc(1, cudaMemAccessFlagsProtNone);
  REQUIRE(pool.set_access(&none, 1) == cudaSuccess);
  CHECK(all_have(blocks, 1, cudaMemAccessFlagsProtNone));
  CHECK(all_have(blocks, 0, cudaMemAccessFlagsProtReadWrite));
  CHECK(pool.stats().ghost_mappings == 0);  // a change of access unmaps the ghosts
  const cudaMemAccessDesc read_write = access_desc(1, cudaMemAccessFlagsProtReadWrite);
  REQUIRE(pool.set_access(&read_write, 1) == cudaSuccess);
  CHECK(all_have(blocks, 1, cudaMemAccessFlagsProtReadWrite));
  // And memory grown after it.
  void* later = pool.allocate(4 * MiB, s);
  CHECK(access(later, 1) == cudaMemAccessFlagsProtReadWrite);
  cudaMemAccessFlags reported = cudaMemAccessFlagsProtNone;
  REQUIRE(pool.get_access(&reported, &read_write.location) == cudaSuccess);
  CHECK(reported == cudaMemAccessFlagsProtReadWrite);

  pool.deallocate(later, s);
  for (void* p : blocks) pool.deallocate(p, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.check_invariants();
  sim.destroy_stream(s);
}
