// Pool::sleep / wake on the simulation: contents back bit-exact at the same
// addresses, the device's memory given back, stream order kept, frees and
// allocations while asleep, many cycles without growth, two pools, peers.
#include "sleep/filled_pool.hpp"
#include "sleep/sleep_checks.hpp"
#include "support/two_device_sim.hpp"

#include <sova/error.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

using namespace sova;
using namespace sova::sleep_test;
using sova::test::two_device_sim;

namespace {

SimConfig sim_config() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  return c;
}

PoolOptions on(SimDriver& sim) {
  PoolOptions o;
  o.driver = &sim;
  return o;
}

}  // namespace

TEST_CASE("sleep with backup gives the memory back; wake restores every byte at the same address", "[sleep]") {
  SimDriver sim(sim_config());
  const std::size_t free_before_pool = device_free(sim);
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(reserved > 0);
  REQUIRE(device_free(sim) == free_before_pool - reserved);

  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(pool.asleep());
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().mappings == 0);
  CHECK(device_free(sim) == free_before_pool);
  const PoolStats asleep = pool.stats();
  CHECK(asleep.asleep_bytes == reserved);
  CHECK(asleep.reserved_current == 0);
  CHECK(asleep.sleep_host_bytes >= 4000 + 3 * MiB + 9 * MiB);
  CHECK(sim.counters().pinned_host_bytes == asleep.sleep_host_bytes);
  pool.check_invariants();

  REQUIRE(pool.wake(stream) == cudaSuccess);
  CHECK_FALSE(pool.asleep());
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  CHECK(pool.stats().reserved_current == reserved);
  CHECK(pool.stats().asleep_bytes == 0);
  CHECK(device_free(sim) == free_before_pool - reserved);
  check_intact(blocks);  // same pointers: the addresses did not change
  pool.check_invariants();
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("sleep waits for the caller's stream only; wake orders the restore before later work there", "[sleep]") {
  SimDriver sim(sim_config());
  Pool pool(on(sim));
  cudaStream_t stream = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  auto* p = static_cast<std::uint32_t*>(pool.allocate(4 * MiB, stream));
  p[0] = 1;
  // Work ordered before the sleep writes late: the backup must see it.
  sim.delay(stream, std::chrono::milliseconds(30));
  sim.launch(stream, [p] { p[0] = 42; });
  // Work on another stream that does not touch the pool is not waited for.
  std::atomic<bool> release_other{false};
  sim.launch(other, [&] {
    while (!release_other.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(sim.counters().device_synchronizes == 0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  // Work enqueued right after wake sees the restored bytes (the copy is
  // ordered before it; the sim copies on the pool's own stream).
  std::uint32_t seen = 0;
  sim.launch(stream, [&] { seen = p[0]; });
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  CHECK(seen == 42);
  release_other = true;
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  pool.deallocate(p, stream);
  sim.destroy_stream(stream);
  sim.destroy_stream(other);
}

TEST_CASE("sleep with discard copies nothing; the memory is usable after wake", "[sleep]") {
  SimDriver sim(sim_config());
  Pool pool(on(sim));
  cudaStream_t stream = sim.create_stream();
  auto* p = static_cast<std::uint8_t*>(pool.allocate(5 * MiB, stream));
  std::memset(p, 7, 5 * MiB);
  const std::uint64_t reserved = pool.stats().reserved_current;
  const std::size_t copies = sim.counters().copies;
  REQUIRE(pool.sleep(SleepMode::discard, stream) == cudaSuccess);
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(pool.stats().sleep_host_bytes == 0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  CHECK(sim.counters().copies == copies);
  CHECK(pool.stats().reserved_current == reserved);
  std::memset(p, 9, 5 * MiB);  // mapped and accessible again
  CHECK(p[5 * MiB - 1] == 9);
  pool.check_invariants();
  pool.deallocate(p, stream);
  sim.destroy_stream(stream);
}

TEST_CASE("sleep and wake are idempotent", "[sleep]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  CHECK(pool.wake(stream) == cudaSuccess);  // awake: nothing to do
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  const std::size_t copies = sim.counters().copies;
  CHECK(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(pool.sleep(SleepMode::discard, stream) == cudaSuccess);
  CHECK(sim.counters().copies == copies);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  CHECK(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("while asleep allocations are refused with cudaErrorNotPermitted and frees are final", "[sleep]") {
  SimDriver sim(sim_config());
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  // A block freed before the sleep sits in the stream's cache: it is not
  // live, and sleeps without a copy.
  void* cached = pool.allocate(2 * MiB, stream);
  pool.deallocate(cached, stream);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);

  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 2 * MiB, stream) == cudaErrorNotPermitted);  // the cached size too
  CHECK(p == nullptr);
  CHECK(pool.try_allocate(&p, 100, stream) == cudaErrorNotPermitted);
  try {
    pool.allocate(1000, stream);
    FAIL("allocate while asleep did not throw");
  } catch (const Error& e) {
    CHECK(e.error() == cudaErrorNotPermitted);
    CHECK(std::string(e.what()).find("asleep") != std::string::npos);
  }
  // A free while asleep: accepted, and its backup is not restored.
  const std::size_t copies_before = sim.counters().copies;
  const Filled freed = blocks[4];  // the 9 MiB block
  pool.deallocate(freed.ptr, stream);
  blocks.erase(blocks.begin() + 4);
  CHECK(pool.block_size(freed.ptr) == 0);
  pool.check_invariants();

  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, blocks);
  CHECK(sim.counters().copies > copies_before);
  CHECK(sim.counters().bytes_copied > 0);
  // Awake, the pool allocates again, the freed memory among it.
  void* again = pool.allocate(9 * MiB, stream);
  CHECK(again != nullptr);
  pool.deallocate(again, stream);
  pool.check_invariants();
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("a thousand cycles grow neither host nor device memory", "[sleep]") {
  SimDriver sim(sim_config());
  const std::size_t free_before_pool = device_free(sim);
  FilledPool start(sim);
  auto& [pool, stream, blocks, reserved] = start;
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  const std::size_t host = sim.counters().pinned_host_bytes;
  for (int cycle = 0; cycle < 1000; ++cycle) {
    const SleepMode mode = cycle % 10 == 9 ? SleepMode::discard : SleepMode::backup;
    REQUIRE(pool.sleep(mode, stream) == cudaSuccess);
    REQUIRE(device_free(sim) == free_before_pool);
    REQUIRE(pool.wake(stream) == cudaSuccess);
    REQUIRE(sim.counters().pinned_host_bytes == host);
    REQUIRE(pool.stats().reserved_current == reserved);
    if (mode == SleepMode::discard) {
      REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
      for (const Filled& f : blocks) fill(f);
    }
  }
  check_intact_once_synchronized(sim, stream, blocks);
  CHECK(sim.counters().mappings == pool.stats().chunks_mapped - pool.stats().chunks_unmapped);
  CHECK(pool.release_sleep_host_memory() == cudaSuccess);
  CHECK(sim.counters().pinned_host_bytes == 0);
  free_blocks_and_stream(pool, sim, stream, blocks);
}

TEST_CASE("two pools sleep and wake independently", "[sleep]") {
  SimDriver sim(sim_config());
  Pool a(on(sim));
  Pool b(on(sim));
  cudaStream_t stream = sim.create_stream();
  std::vector<Filled> in_a = allocate_filled(a, stream, 10);
  std::vector<Filled> in_b = allocate_filled(b, stream, 50);
  const std::uint64_t reserved_b = b.stats().reserved_current;
  REQUIRE(a.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(a.asleep());
  CHECK_FALSE(b.asleep());
  CHECK(sim.counters().physical_bytes == reserved_b);
  check_intact(in_b);
  void* more = b.allocate(8 * MiB, stream);  // the other pool keeps working
  b.deallocate(more, stream);
  REQUIRE(b.sleep(SleepMode::backup, stream) == cudaSuccess);
  REQUIRE(a.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, in_a);
  CHECK(b.asleep());
  REQUIRE(b.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, in_b);
  for (const Filled& f : in_a) a.deallocate(f.ptr, stream);
  for (const Filled& f : in_b) b.deallocate(f.ptr, stream);
  sim.destroy_stream(stream);
}

TEST_CASE("wake gives back the access granted to peers", "[sleep]") {
  SimDriver sim(two_device_sim());
  Pool pool(on(sim));
  cudaStream_t stream = sim.create_stream();
  void* p = pool.allocate(6 * MiB, stream);
  cudaMemAccessDesc desc{};
  desc.location = {cudaMemLocationTypeDevice, 1};
  desc.flags = cudaMemAccessFlagsProtRead;
  REQUIRE(pool.set_access(&desc, 1) == cudaSuccess);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  CHECK(sim.access_at(reinterpret_cast<std::uintptr_t>(p), 1, &flags) == cudaErrorInvalidValue);  // nothing mapped
  REQUIRE(pool.wake(stream) == cudaSuccess);
  REQUIRE(sim.access_at(reinterpret_cast<std::uintptr_t>(p), 1, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtRead);
  REQUIRE(sim.access_at(reinterpret_cast<std::uintptr_t>(p), 0, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  pool.deallocate(p, stream);
  sim.destroy_stream(stream);
}

TEST_CASE("remapped chunks and their ghost mappings all go to sleep", "[sleep]") {
  SimDriver sim(sim_config());
  PoolOptions o = on(sim);
  o.remap = true;
  Pool pool(o);
  cudaStream_t stream = sim.create_stream();
  // Free memory, then a request elsewhere: remapping may move chunks and
  // leave ghosts behind.
  std::vector<void*> small;
  for (int i = 0; i < 8; ++i) small.push_back(pool.allocate(2 * MiB, stream));
  for (void* q : small) pool.deallocate(q, stream);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  pool.stream_synchronized(stream);
  Filled big{pool.allocate(24 * MiB, stream), 24 * MiB, 3};
  fill(big);
  REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
  CHECK(sim.counters().mappings == 0);
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(pool.stats().ghost_mappings == 0);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  check_intact_once_synchronized(sim, stream, {big});
  pool.check_invariants();
  free_blocks_and_stream(pool, sim, stream, {big});
}

TEST_CASE("a pool destroyed while asleep leaves nothing with the driver", "[sleep]") {
  SimDriver sim(sim_config());
  const std::size_t free_before_pool = device_free(sim);
  cudaStream_t stream = sim.create_stream();
  {
    Pool pool(on(sim));
    std::vector<Filled> blocks = allocate_filled(pool, stream);
    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    CHECK(sim.counters().pinned_host_bytes > 0);
  }
  check_nothing_left_with_driver(sim);
  CHECK(device_free(sim) == free_before_pool);
  sim.destroy_stream(stream);
}
