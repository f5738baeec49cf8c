// Frees on a stream of another device than the pool's. cudaFreeAsync accepts
// a free on any stream, and so does a pool; but its fences are events of the
// pool's device, which cannot be recorded on another device's stream, and a
// synchronize of the pool's device does not wait for another device's work.
// Every path that releases or reuses memory whose frees it cannot prove
// complete (trim, the out-of-memory synchronize, destruction) must therefore
// also wait for the freeing stream's device. Each case queues work on a
// device-0 stream that "reads" a device-1 pool's block for a while, frees the
// block on that stream, and checks that the memory is neither released nor
// handed to another stream before that work has run.
#include "core/sim_pool_fixture.hpp"
#include "support/scoped_current_device.hpp"
#include "support/two_device_sim.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

PoolOptions device_one_pool(SimDriver& sim) {
  PoolOptions options = options_on(sim);
  options.device = 1;
  options.max_size = 8 * MiB;
  options.release_threshold = ~std::uint64_t{0};  // the release worker keeps out of it
  return options;
}

/// Work on `stream` that stands for a kernel still reading a block: it runs
/// for a while and then says it is done.
std::shared_ptr<std::atomic<bool>> slow_reader(SimDriver& sim, cudaStream_t stream) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  sim.launch(stream, [done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    done->store(true);
  });
  return done;
}

}  // namespace

TEST_CASE("trim_to waits for the device of the stream a block was freed on", "[core][devices][cross-device]") {
  SimDriver sim(two_device_sim());
  Pool pool(device_one_pool(sim));
  cudaStream_t s1 = sim.create_stream(false, 1);
  cudaStream_t s0 = sim.create_stream(false, 0);
  void* p = pool.allocate(4 * MiB, s1);
  REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
  auto done = slow_reader(sim, s0);
  REQUIRE(pool.try_deallocate(p, s0) == cudaSuccess);  // accepted, as cudaFreeAsync accepts it
  const std::size_t releases_before = sim.counters().physical_releases;
  pool.trim_to(0);
  const bool released = sim.counters().physical_releases > releases_before;
  CHECK((!released || done->load()));
  REQUIRE(sim.stream_synchronize(s0) == cudaSuccess);
  pool.trim_to(0);
  CHECK(reserved_of(pool) == 0);  // once complete, the memory goes
  sim.destroy_stream(s0);
  sim.destroy_stream(s1);
}

TEST_CASE("a free on device 0's legacy stream is not completed by device 1's legacy stream",
          "[core][devices][cross-device]") {
  SimDriver sim(two_device_sim());
  Pool pool(device_one_pool(sim));
  cudaStream_t s1 = sim.create_stream(false, 1);
  void* p = pool.allocate(4 * MiB, s1);
  REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
  std::shared_ptr<std::atomic<bool>> done;
  {
    ScopedCurrentDevice current(sim, 0);  // stream 0 is device 0's legacy stream now
    done = slow_reader(sim, nullptr);
    REQUIRE(pool.try_deallocate(p, nullptr) == cudaSuccess);
  }
  {
    // The same handle, 0, names device 1's legacy stream here: a fence
    // recorded on it says nothing of device 0's work.
    ScopedCurrentDevice current(sim, 1);
    const std::size_t releases_before = sim.counters().physical_releases;
    pool.trim_to(0);
    const bool released = sim.counters().physical_releases > releases_before;
    CHECK((!released || done->load()));
  }
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  sim.destroy_stream(s1);
}

TEST_CASE("the out-of-memory synchronize waits for the device of the freeing stream", "[core][devices][cross-device]") {
  SimDriver sim(two_device_sim());
  Pool pool(device_one_pool(sim));
  cudaStream_t s1 = sim.create_stream(false, 1);
  cudaStream_t s0 = sim.create_stream(false, 0);
  void* p = pool.allocate(8 * MiB, s1);  // the whole pool
  REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
  auto done = slow_reader(sim, s0);
  REQUIRE(pool.try_deallocate(p, s0) == cudaSuccess);
  void* q = nullptr;
  const cudaError_t error = pool.try_allocate(&q, 8 * MiB, s1);  // only p's memory can serve it
  CHECK((error != cudaSuccess || done->load()));
  if (error == cudaSuccess) pool.deallocate(q, s1);
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
  sim.destroy_stream(s0);
  sim.destroy_stream(s1);
}

TEST_CASE("destroying a pool waits for the device of a stream a block was freed on", "[core][devices][cross-device]") {
  SimDriver sim(two_device_sim());
  cudaStream_t s1 = sim.create_stream(false, 1);
  cudaStream_t s0 = sim.create_stream(false, 0);
  std::shared_ptr<std::atomic<bool>> done;
  {
    Pool pool(device_one_pool(sim));
    void* p = pool.allocate(4 * MiB, s1);
    REQUIRE(sim.stream_synchronize(s1) == cudaSuccess);
    done = slow_reader(sim, s0);
    REQUIRE(pool.try_deallocate(p, s0) == cudaSuccess);
  }  // ~Pool releases every chunk
  CHECK(done->load());
  REQUIRE(sim.stream_synchronize(s0) == cudaSuccess);
  sim.destroy_stream(s0);
  sim.destroy_stream(s1);
}

TEST_CASE("stream 0 with another device current is another stream: its frees are not handed to the first",
          "[core][devices][cross-device]") {
  SimDriver sim(two_device_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);                     // device 0
  void* p = pool.allocate(MiB, nullptr);  // device 0's legacy stream
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  std::shared_ptr<std::atomic<bool>> done;
  {
    ScopedCurrentDevice current(sim, 1);  // stream 0 is device 1's legacy stream now
    done = slow_reader(sim, nullptr);
    REQUIRE(pool.try_deallocate(p, nullptr) == cudaSuccess);
  }
  // Device 0's legacy stream is not ordered after device 1's: the block is
  // not its own free to reuse at once.
  void* q = pool.allocate(MiB, nullptr);
  CHECK((q != p || done->load()));
  pool.deallocate(q, nullptr);
  REQUIRE(sim.device_synchronize(1) == cudaSuccess);
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
}
