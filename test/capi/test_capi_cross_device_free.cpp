// C API: a destroyed pool whose last block is freed on another device's
// stream. The release that this free triggers waits for the device's work
// that may still use the memory (docs/c-api.md) — the freeing stream's device
// included, not only the pool's.
#include "capi/capi_test_util.hpp"

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

using namespace sova::capi_test;

TEST_CASE("capi: a destroyed pool's last block freed on device 0's stream 0 is released after device 0's work",
          "[capi][devices]") {
  sim();
  REQUIRE(sim().set_current_device(0) == cudaSuccess);
  cudaStream_t s1 = sim().create_stream(false, 1);
  ScopedPool pool(1);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4 * MiB, pool, s1) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s1) == cudaSuccess);
  const std::size_t reservations = sim().counters().reservations;
  REQUIRE(sovaMemPoolDestroy(pool.release()) == cudaSuccess);  // a live block: release deferred
  REQUIRE(sim().counters().reservations == reservations);

  // Device 0's legacy stream still "reads" the block when it is freed there.
  auto done = std::make_shared<std::atomic<bool>>(false);
  sim().launch(nullptr, [done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    done->store(true);
  });
  REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);  // the last block: the pool is released now
  CHECK(sim().counters().reservations == reservations - 1);
  CHECK(done->load());
  REQUIRE(sim().device_synchronize(0) == cudaSuccess);
  sim().destroy_stream(s1);
}
