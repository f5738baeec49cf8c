// Sleep and wake on the GPU (suite 'gpu'): a round trip with kernels in
// flight on other streams (sleep waits only for the caller's stream), work
// ordered on the caller's stream before the sleep seen by the backup, and the
// restore ordered before later work on it; the device's memory given back.
// Run it under compute-sanitizer too (docs/sleep-wake.md).
#include "gpu/spin_kernel.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

using namespace sova;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;

std::size_t device_free() {
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  return free_bytes;
}
}  // namespace

TEST_CASE("sleep gpu: a round trip with kernels in flight on other streams", "[gpu][sleep]") {
  cudaStream_t stream = nullptr, busy = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking) == cudaSuccess);
  const std::size_t free_before_pool = device_free();
  {
    Pool pool;
    std::vector<void*> blocks;
    const std::size_t sizes[] = {1000, 3 * kMiB + 5, 64 * kMiB, 512, 130 * kMiB};
    for (std::size_t i = 0; i < std::size(sizes); ++i) {
      void* p = pool.allocate(sizes[i], stream);
      REQUIRE(cudaMemsetAsync(p, static_cast<int>(0x10 + i), sizes[i], stream) == cudaSuccess);
      blocks.push_back(p);
    }
    // A long kernel on another stream that touches nothing of the pool:
    // sleep must not wait for it (no device synchronize).
    REQUIRE(sova::gputest::launch_spin(busy, 4'000'000'000ull) == cudaSuccess);
    // Work on the caller's stream right before the sleep: the backup sees it.
    REQUIRE(sova::gputest::launch_spin(stream, 50'000'000ull) == cudaSuccess);
    REQUIRE(cudaMemsetAsync(blocks[0], 0x77, 1000, stream) == cudaSuccess);
    const PoolStats awake = pool.stats();
    const std::uint64_t reserved = awake.reserved_current;
    const std::uint64_t chunks = awake.chunks_mapped - awake.chunks_unmapped;

    REQUIRE(pool.sleep(SleepMode::backup, stream) == cudaSuccess);
    CHECK(cudaStreamQuery(busy) == cudaErrorNotReady);  // the 4 s kernel was not waited for
    CHECK(pool.asleep());
    CHECK(pool.stats().asleep_bytes == reserved);
    // The device's free memory back within a granule per chunk of what it
    // was before the pool existed (the copy stream and events cost a little).
    const std::size_t free_asleep = device_free();
    INFO("free before the pool " << free_before_pool << ", asleep " << free_asleep << ", chunks " << chunks);
    CHECK(free_asleep + chunks * 2 * kMiB >= free_before_pool);
    void* refused = nullptr;
    CHECK(pool.try_allocate(&refused, 1000, stream) == cudaErrorNotPermitted);

    REQUIRE(pool.wake(stream) == cudaSuccess);
    // Later work on the stream sees the contents: copy back on it, no sync between.
    std::vector<unsigned char> host(130 * kMiB);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      REQUIRE(cudaMemcpyAsync(host.data(), blocks[i], sizes[i], cudaMemcpyDeviceToHost, stream) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
      const unsigned char expect = static_cast<unsigned char>(0x10 + i);
      std::size_t wrong = 0;
      for (std::size_t b = 0; b < sizes[i]; ++b) {
        const unsigned char want = (i == 0) ? 0x77 : expect;
        wrong += host[b] != want ? 1 : 0;
      }
      CHECK(wrong == 0);
    }
    CHECK(pool.stats().reserved_current == reserved);
    pool.check_invariants();
    for (void* p : blocks) pool.deallocate(p, stream);
    REQUIRE(cudaStreamSynchronize(busy) == cudaSuccess);
  }
  cudaStreamDestroy(stream);
  cudaStreamDestroy(busy);
}
