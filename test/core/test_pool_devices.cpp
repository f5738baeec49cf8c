// Several devices on the simulation (docs/design.md, "Several devices"): a pool records its fences on
// its own device whatever the calling thread's current device, and works from
// threads with different current devices. An event can be recorded only on a
// stream of its own device (the simulation refuses the rest, as CUDA does), so
// a pool that created its fence events on the caller's current device lost
// every fence of a pool on another device: frees on one stream then reached
// another only through a device synchronize.
#include "core/sim_pool_fixture.hpp"
#include "support/access_desc.hpp"
#include "support/scoped_current_device.hpp"
#include "support/two_device_sim.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

}  // namespace

TEST_CASE("a pool on device 1 fences its frees on device 1 from a thread whose current device is 0",
          "[core][devices][issue16]") {
  SimDriver sim(two_device_sim());
  ScopedCurrentDevice current(sim, 0);
  PoolOptions options = options_on(sim);
  options.device = 1;
  options.max_size = 4 * MiB;
  Pool pool(options);
  cudaStream_t a = sim.create_stream(false, 1);
  cudaStream_t b = sim.create_stream(false, 1);

  // As the conformance suite's fence test (test_cross_stream.cpp): B asks A
  // for a fence, A's next call records it, B then waits on it.
  void* p = pool.allocate(MiB, a);
  void* r = pool.allocate(512, a);
  void* filler = pool.allocate(MiB - 512, b);
  sim.delay(a, std::chrono::milliseconds(300));  // A stays busy past B's wait
  pool.deallocate(p, a);
  const std::uint64_t events_before = pool.stats().events_recorded;
  const std::size_t sim_events_before = sim.counters().events_recorded;
  void* q1 = pool.allocate(2 * MiB, b);  // nothing covers p yet: B grows and asks A for a fence
  CHECK(q1 != p);
  pool.deallocate(r, a);  // A's next call records the fence: on device 1
  CHECK(pool.stats().events_recorded == events_before + 1);
  CHECK(sim.counters().events_recorded == sim_events_before + 1);
  void* q2 = pool.allocate(MiB, b);  // the pool is full: B waits on A's fence
  CHECK(q2 == p);
  CHECK(pool.stats().cross_stream_waits == 1);
  CHECK(pool.stats().device_synchronizes == 0);
  for (void* x : {filler, q1, q2}) pool.deallocate(x, b);
  REQUIRE(sim.stream_synchronize(a) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
  CHECK_NOTHROW(pool.check_invariants());
  sim.destroy_stream(a);
  sim.destroy_stream(b);
}

TEST_CASE("a pool used from threads with different current devices", "[core][devices][issue16]") {
  SimDriver sim(two_device_sim());
  PoolOptions options = options_on(sim);
  options.device = 1;
  Pool pool(options);
  constexpr int kThreads = 4;
  constexpr int kSteps = 3000;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Half the threads on device 0, half on device 1; every stream is device 1's.
      if (sim.set_current_device(t % 2) != cudaSuccess) ++failures;
      cudaStream_t s = sim.create_stream(false, 1);
      std::vector<void*> live;
      for (int step = 0; step < kSteps; ++step) {
        void* p = nullptr;
        if (pool.try_allocate(&p, 512 + static_cast<std::size_t>((step * 7 + t) % 64) * 4096, s) != cudaSuccess) {
          ++failures;
          continue;
        }
        live.push_back(p);
        if (live.size() > 8) {
          if (pool.try_deallocate(live.front(), s) != cudaSuccess) ++failures;
          live.erase(live.begin());
        }
      }
      for (void* p : live)
        if (pool.try_deallocate(p, s) != cudaSuccess) ++failures;
      if (sim.stream_synchronize(s) != cudaSuccess) ++failures;
      sim.destroy_stream(s);
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  CHECK(pool.stats().used_current == 0);
  CHECK_NOTHROW(pool.check_invariants());
}

TEST_CASE("peer access granted to a pool covers chunks mapped later, by growth and by remapping",
          "[core][devices][issue16]") {
  SimDriver sim(two_device_sim());
  Pool pool(peer_access_pool_options(sim));
  cudaStream_t s = sim.create_stream(false, 0);
  auto access = [&](const void* p, int device) { return access_on(sim, p, device); };
  void* first = pool.allocate(2 * MiB, s);  // mapped before the grant
  CHECK(access(first, 1) == cudaMemAccessFlagsProtNone);
  const cudaMemAccessDesc peer = access_desc(1, cudaMemAccessFlagsProtReadWrite);
  REQUIRE(pool.set_access(&peer, 1) == cudaSuccess);
  CHECK(access(first, 1) == cudaMemAccessFlagsProtReadWrite);  // what is mapped now
  cudaMemAccessFlags reported = cudaMemAccessFlagsProtNone;
  REQUIRE(pool.get_access(&reported, &peer.location) == cudaSuccess);
  CHECK(reported == cudaMemAccessFlagsProtReadWrite);

  // Growth: seven more 2 MiB blocks, one new chunk each.
  std::vector<void*> blocks{first};
  for (int i = 0; i < 7; ++i) blocks.push_back(pool.allocate(2 * MiB, s));
  for (void* p : blocks) {
    CHECK(access(p, 0) == cudaMemAccessFlagsProtReadWrite);
    CHECK(access(p, 1) == cudaMemAccessFlagsProtReadWrite);
  }
  // Remapping: the even blocks freed and known complete leave four chunks in
  // pieces; an 8 MiB request gets them moved under its VA.
  for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  const std::uint64_t remapped_before = pool.stats().chunks_remapped;
  void* big = pool.allocate(8 * MiB, s);
  REQUIRE(pool.stats().chunks_remapped == remapped_before + 4);
  for (std::size_t offset = 0; offset < 8 * MiB; offset += 2 * MiB) {
    const char* at = static_cast<const char*>(big) + offset;
    CHECK(access(at, 0) == cudaMemAccessFlagsProtReadWrite);
    CHECK(access(at, 1) == cudaMemAccessFlagsProtReadWrite);
  }
  pool.deallocate(big, s);
  for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("pool devices: a device-1 pool's frees on the legacy stream are released by the worker (device 0 current there)",
          "[core][devices]") {
  // The release worker's thread has device 0 current: the fence it records on
  // the legacy stream must be device 1's (Driver::event_record_on), or the
  // frees never complete and idle memory is never released.
  SimDriver sim(two_device_sim());
  ScopedCurrentDevice current(sim, 1);
  PoolOptions options;
  options.driver = &sim;
  options.device = 1;
  Pool pool(options);  // release threshold 0: idle memory goes back
  void* p = pool.allocate(1000, nullptr);
  pool.deallocate(p, nullptr);
  REQUIRE(sim.stream_synchronize(nullptr) == cudaSuccess);
  std::uint64_t reserved = 1;
  for (int i = 0; i < 200 && reserved != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(pool.get_attribute(cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess);
  }
  CHECK(reserved == 0);
}
