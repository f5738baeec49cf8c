// A free made on another host thread while wake runs, on the GPU (suite
// 'gpu'; run it under compute-sanitizer too: docs/sleep-wake.md, "Frees while
// the restore runs"). A thread frees live blocks on its own stream as soon
// as wake begins, allocates them again once the pool is awake and writes its
// own pattern there at once; the wake's restore of 256 MiB of blocks runs
// meanwhile. Every byte the freeing thread wrote must hold its pattern after
// both streams are done: a free not ordered after the restore had its block
// overwritten by the backup (the simulation's twin, with a deterministic
// interleaving: test/sleep/test_sleep_restore.cpp, "[wake_race]").
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::scenario;

TEST_CASE("sleep gpu: blocks freed on another thread while wake runs keep what the freeing stream writes",
          "[gpu][sleep][wake_race]") {
  const SleepMode mode = GENERATE(SleepMode::backup, SleepMode::discard_zeroed);
  cudaStream_t waker = nullptr, freer_stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&waker, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&freer_stream, cudaStreamNonBlocking) == cudaSuccess);
  Counters wrong(2);
  {
    Pool pool;  // the default: release threshold 0, so the release worker may also take what is freed
    constexpr std::size_t kBlocks = 64, kBytes = 4 * kMiB;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < kBlocks; ++i) {
      blocks.push_back(pool.allocate(kBytes, waker));
      fill(0, blocks.back(), kBytes, 0x1000 + static_cast<std::uint32_t>(i), waker);
    }
    REQUIRE(pool.sleep(mode, waker) == cudaSuccess);
    // The odd blocks go to the freeing thread, the even ones stay live.
    std::atomic<bool> waking{false};
    std::vector<void*> again;
    cudaError_t freer_error = cudaSuccess;
    std::thread freer([&] {
      while (!waking.load()) std::this_thread::yield();
      for (std::size_t i = 1; i < kBlocks; i += 2) {
        if (pool.try_deallocate(blocks[i], freer_stream) != cudaSuccess) freer_error = cudaErrorUnknown;
      }
      // Allocations are refused while asleep: the first one that succeeds is
      // right after the wake; each block then gets the freeing stream's pattern.
      for (std::size_t n = 0; n < kBlocks / 2; ++n) {
        void* p = nullptr;
        cudaError_t e;
        while ((e = pool.try_allocate(&p, kBytes, freer_stream)) == cudaErrorNotPermitted) std::this_thread::yield();
        if (e != cudaSuccess) {
          freer_error = e;
          return;
        }
        fill(0, p, kBytes, 0x2000 + static_cast<std::uint32_t>(n), freer_stream);
        again.push_back(p);
      }
    });
    waking.store(true);
    REQUIRE(pool.wake(waker) == cudaSuccess);
    freer.join();
    REQUIRE(freer_error == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(freer_stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(waker) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the pool's copy stream too
    for (std::size_t n = 0; n < again.size(); ++n) {
      count_wrong(0, again[n], kBytes, 0x2000 + static_cast<std::uint32_t>(n), wrong.slot(0), waker);
    }
    if (mode == SleepMode::backup) {
      for (std::size_t i = 0; i < kBlocks; i += 2) {
        count_wrong(0, blocks[i], kBytes, 0x1000 + static_cast<std::uint32_t>(i), wrong.slot(1), waker);
      }
    }
    REQUIRE(cudaStreamSynchronize(waker) == cudaSuccess);
    INFO((mode == SleepMode::backup ? "backup" : "discard_zeroed"));
    CHECK(wrong.read(0) == 0);  // the freeing stream's bytes
    CHECK(wrong.read(1) == 0);  // the blocks that stayed live
    for (void* p : again) pool.deallocate(p, freer_stream);
    for (std::size_t i = 0; i < kBlocks; i += 2) pool.deallocate(blocks[i], waker);
    REQUIRE(cudaStreamSynchronize(freer_stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(waker) == cudaSuccess);
  }
  REQUIRE(cudaStreamDestroy(freer_stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(waker) == cudaSuccess);
}
