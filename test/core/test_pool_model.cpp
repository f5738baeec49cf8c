// Randomized operation sequences against a simple model of what must hold:
// live blocks never overlap, each keeps its contents, the pool's figures match
// the model's, and every structural invariant holds after each step.
#include "core/sim_pool_fixture.hpp"

#include <cstring>
#include <map>
#include <random>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

struct LiveBlock {
  std::size_t bytes;
  unsigned char cookie;
  cudaStream_t stream;
};

void run_random_walk(std::uint32_t seed, int steps, std::size_t max_size, bool with_trim) {
  SimDriver sim(small_sim(std::size_t{512} << 20));
  Pool pool(options_on(sim));
  std::vector<cudaStream_t> streams = {sim.create_stream(), sim.create_stream(), nullptr /* legacy */};
  std::mt19937 rng(seed);
  std::map<std::uintptr_t, LiveBlock> live;
  std::uint64_t model_used = 0;

  for (int step = 0; step < steps; ++step) {
    const int action = static_cast<int>(rng() % 100);
    cudaStream_t stream = streams[rng() % streams.size()];
    if (action < 55 || live.empty()) {
      // Sizes skewed small, as real programs are.
      const std::size_t bytes = 1 + (rng() % 4 == 0 ? rng() % max_size : rng() % 65536);
      void* p = nullptr;
      const cudaError_t error = pool.try_allocate(&p, bytes, stream);
      if (error == cudaErrorMemoryAllocation) continue;  // the model allows running out
      REQUIRE(error == cudaSuccess);
      const auto address = reinterpret_cast<std::uintptr_t>(p);
      REQUIRE(address % 512 == 0);
      auto after = live.lower_bound(address);
      if (after != live.end()) REQUIRE(address + bytes <= after->first);
      if (after != live.begin()) {
        auto before = std::prev(after);
        REQUIRE(before->first + before->second.bytes <= address);
      }
      const auto cookie = static_cast<unsigned char>(rng());
      sim.stream_synchronize(stream);  // earlier work on this stream may still touch reused memory
      std::memset(p, cookie, bytes);
      live[address] = LiveBlock{bytes, cookie, stream};
      model_used += bytes;
    } else if (action < 95) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      const auto* bytes = reinterpret_cast<const unsigned char*>(it->first);
      REQUIRE(bytes[0] == it->second.cookie);
      REQUIRE(bytes[it->second.bytes - 1] == it->second.cookie);
      REQUIRE(bytes[it->second.bytes / 2] == it->second.cookie);
      REQUIRE(pool.try_deallocate(reinterpret_cast<void*>(it->first), stream) == cudaSuccess);
      REQUIRE(pool.try_deallocate(reinterpret_cast<void*>(it->first), stream) == cudaErrorInvalidValue);
      model_used -= it->second.bytes;
      live.erase(it);
    } else if (with_trim) {
      pool.trim_to(rng() % 2 == 0 ? 0 : std::size_t{32} << 20);
    }
    const PoolStats stats = pool.stats();
    REQUIRE(stats.used_current == model_used);
    REQUIRE(stats.live_blocks == live.size());
    REQUIRE(stats.reserved_current <= stats.reserved_high);
    if (step % 7 == 0) pool.check_invariants();
  }
  for (auto& entry : live) {
    REQUIRE(pool.try_deallocate(reinterpret_cast<void*>(entry.first), entry.second.stream) == cudaSuccess);
  }
  pool.check_invariants();
  sim.device_synchronize(0);
  pool.trim_to(0);
  CHECK(reserved_of(pool) == 0);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
  for (cudaStream_t s : streams) {
    if (s != nullptr) sim.destroy_stream(s);
  }
}

}  // namespace

TEST_CASE("random walks keep every invariant (small blocks)", "[core][model]") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    INFO("seed " << seed);
    run_random_walk(seed, 3000, 256 * 1024, false);
  }
}

TEST_CASE("random walks keep every invariant (large blocks, trims)", "[core][model]") {
  for (std::uint32_t seed : {11u, 12u}) {
    INFO("seed " << seed);
    run_random_walk(seed, 1500, std::size_t{24} << 20, true);
  }
}
