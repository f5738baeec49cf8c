// GPU only: a pool sleeps (backup) and wakes on its own stream while long
// kernels on other streams keep writing other memory, one buffer in another
// sova pool and one from cudaMalloc. Sleep waits only for its own stream
// (the others are still running when it returns), the others' results are
// exact, and the sleeping pool's contents come back. tools/device/sleep-wake.sh
// runs it under compute-sanitizer's memcheck too ("inflight" step).
#include "gpu_pool/lcg_kernel.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <iterator>
#include <vector>

using namespace sova;
using sova::gputest::launch_lcg_rounds;
using sova::gputest::lcg_expected;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kWords = std::size_t{1} << 20;  // 4 MiB a buffer
constexpr unsigned kRounds = 40;
constexpr unsigned long long kNsPerRound = 75'000'000;  // 3 s a kernel, at least

std::uint32_t initial_word(std::size_t i, std::uint32_t seed) {
  return static_cast<std::uint32_t>(i * 2654435761u) ^ seed;
}

void upload_initial(std::uint32_t* device, std::uint32_t seed, cudaStream_t stream) {
  std::vector<std::uint32_t> host(kWords);
  for (std::size_t i = 0; i < kWords; ++i) host[i] = initial_word(i, seed);
  REQUIRE(cudaMemcpyAsync(device, host.data(), kWords * 4, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
}

/// Words of `device` that are not what kRounds rounds make of their start.
std::size_t wrong_words(const std::uint32_t* device, std::uint32_t seed) {
  std::vector<std::uint32_t> host(kWords);
  REQUIRE(cudaMemcpy(host.data(), device, kWords * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kWords; ++i) wrong += host[i] != lcg_expected(initial_word(i, seed), kRounds) ? 1 : 0;
  return wrong;
}

unsigned char block_byte(std::size_t block, std::size_t i) {
  return static_cast<unsigned char>(block * 37 + i * 13 + (i >> 12));
}

}  // namespace

TEST_CASE("sleep gpu: other streams' kernels writing other memory run on, exact, while a pool sleeps and wakes",
          "[gpu][sleep][inflight]") {
  cudaStream_t own = nullptr, other_pool_stream = nullptr, malloc_stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&other_pool_stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&malloc_stream, cudaStreamNonBlocking) == cudaSuccess);
  {
    Pool sleeper;
    Pool other;
    auto* in_other = static_cast<std::uint32_t*>(other.allocate(kWords * 4, other_pool_stream));
    void* malloced = nullptr;
    REQUIRE(cudaMalloc(&malloced, kWords * 4) == cudaSuccess);
    auto* in_malloc = static_cast<std::uint32_t*>(malloced);
    upload_initial(in_other, 0x1234u, other_pool_stream);
    upload_initial(in_malloc, 0xbeefu, malloc_stream);

    // The sleeping pool's blocks, each with its own bytes.
    const std::size_t sizes[] = {1000, 3 * kMiB + 5, 40 * kMiB, 512, 70 * kMiB + 1};
    std::vector<void*> blocks;
    std::vector<std::vector<unsigned char>> contents;
    for (std::size_t b = 0; b < std::size(sizes); ++b) {
      blocks.push_back(sleeper.allocate(sizes[b], own));
      contents.emplace_back(sizes[b]);
      for (std::size_t i = 0; i < sizes[b]; ++i) contents[b][i] = block_byte(b, i);
      REQUIRE(cudaMemcpyAsync(blocks[b], contents[b].data(), sizes[b], cudaMemcpyHostToDevice, own) == cudaSuccess);
    }
    REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);

    // The long kernels on the other streams, not ordered with `own` at all.
    REQUIRE(launch_lcg_rounds(in_other, kWords, kRounds, kNsPerRound, other_pool_stream) == cudaSuccess);
    REQUIRE(launch_lcg_rounds(in_malloc, kWords, kRounds, kNsPerRound, malloc_stream) == cudaSuccess);

    for (int cycle = 0; cycle < 3; ++cycle) {
      INFO("cycle " << cycle);
      REQUIRE(sleeper.sleep(SleepMode::backup, own) == cudaSuccess);
      CHECK(sleeper.asleep());
      REQUIRE(sleeper.wake(own) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);
      // Sleep and wake waited for `own` alone: the others still run.
      CHECK(cudaStreamQuery(other_pool_stream) == cudaErrorNotReady);
      CHECK(cudaStreamQuery(malloc_stream) == cudaErrorNotReady);
    }
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      std::vector<unsigned char> back(sizes[b]);
      REQUIRE(cudaMemcpyAsync(back.data(), blocks[b], sizes[b], cudaMemcpyDeviceToHost, own) == cudaSuccess);
      REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);
      INFO("block " << b);
      CHECK(back == contents[b]);
    }

    REQUIRE(cudaStreamSynchronize(other_pool_stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(malloc_stream) == cudaSuccess);
    CHECK(wrong_words(in_other, 0x1234u) == 0);
    CHECK(wrong_words(in_malloc, 0xbeefu) == 0);

    for (void* p : blocks) sleeper.deallocate(p, own);
    other.deallocate(in_other, other_pool_stream);
    REQUIRE(cudaFree(in_malloc) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(own) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(other_pool_stream) == cudaSuccess);
  }
  REQUIRE(cudaStreamDestroy(own) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(other_pool_stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(malloc_stream) == cudaSuccess);
}
