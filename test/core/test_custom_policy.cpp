// A placement policy of one's own: the example that include/sova/placement.hpp
// points to, and what the pool does with policies that break their contract.
#include "core/sim_pool_fixture.hpp"

#include <sova/placement.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <random>

using namespace sova;
using namespace sova::test;

namespace {

// The example: 4 KiB pages, each block at the END of the free range it is
// placed in (top-down). Nothing else is needed: the pool's caches, stream
// rules, coalescing, backing and remapping work for it as for the built-ins.
class TopDownPages final : public PlacementPolicy {
 public:
  static constexpr std::size_t kPage = 4096;
  const char* name() const noexcept override { return "top_down_pages"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return (bytes + kPage - 1) / kPage * kPage; }
  std::size_t place(FreeRange range, std::size_t size, std::size_t) const noexcept override {
    return size <= range.size ? range.offset + range.size - size : kNoFit;
  }
};

// Breaks the contract in one of two ways.
class Broken final : public PlacementPolicy {
 public:
  explicit Broken(bool short_blocks) : short_blocks_(short_blocks) {}
  const char* name() const noexcept override { return "broken"; }
  std::size_t block_size(std::size_t bytes) const noexcept override {
    return short_blocks_ ? bytes / 2 / 512 * 512 : (bytes + 511) / 512 * 512;
  }
  std::size_t place(FreeRange range, std::size_t, std::size_t) const noexcept override {
    return range.offset + range.size;  // past the range: never valid
  }

 private:
  bool short_blocks_;
};

Pool make_pool(SimDriver& sim, std::shared_ptr<const PlacementPolicy> policy) {
  PoolOptions options = options_on(sim);
  options.policy = Policy::custom;
  options.placement = std::move(policy);
  return Pool(options);
}

}  // namespace

TEST_CASE("a custom policy decides sizes and places blocks top-down", "[core][policy]") {
  SimDriver sim(small_sim());
  Pool pool = make_pool(sim, std::make_shared<TopDownPages>());
  cudaStream_t s = sim.create_stream();
  auto* a = static_cast<char*>(pool.allocate(1000, s));
  auto* b = static_cast<char*>(pool.allocate(5000, s));
  // The first block sits at the very end of the VA; the second, two pages, just below it.
  CHECK(a - b == 8192);
  CHECK(pool.contains(a + 4095));
  CHECK(!pool.contains(a + 4096));
  CHECK(pool.stats().used_current == 6000);
  pool.deallocate(a, s);
  // A freed page is reused by the next request that rounds to it.
  CHECK(pool.allocate(4000, s) == a);
  pool.check_invariants();

  // A random walk: no overlaps, contents kept, invariants hold.
  std::mt19937 rng(5);
  std::map<char*, std::size_t> live{{a, 4000}, {b, 5000}};
  std::memset(a, 1, 4000);
  std::memset(b, 1, 5000);
  for (int step = 0; step < 1500; ++step) {
    if (rng() % 2 == 0 || live.empty()) {
      const std::size_t bytes = 1 + rng() % (rng() % 8 == 0 ? (std::size_t{6} << 20) : 40000);
      auto* p = static_cast<char*>(pool.allocate(bytes, s));
      auto next = live.lower_bound(p);
      if (next != live.end()) REQUIRE(p + bytes <= next->first);
      if (next != live.begin()) REQUIRE(std::prev(next)->first + std::prev(next)->second <= p);
      sim.stream_synchronize(s);
      std::memset(p, 1, bytes);
      live[p] = bytes;
    } else {
      auto it = std::next(live.begin(), static_cast<std::ptrdiff_t>(rng() % live.size()));
      REQUIRE(it->first[it->second - 1] == 1);
      pool.deallocate(it->first, s);
      live.erase(it);
    }
    if (step % 50 == 0) pool.check_invariants();
  }
  for (auto& [p, bytes] : live) pool.deallocate(p, s);
  pool.check_invariants();
  sim.destroy_stream(s);
}

TEST_CASE("Policy::custom without a policy object is refused", "[core][policy]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.policy = Policy::custom;
  try {
    Pool pool(options);
    FAIL("no error");
  } catch (const Error& error) {
    CHECK(error.error() == cudaErrorInvalidValue);
  }
}

TEST_CASE("a policy that breaks its contract fails the allocation and changes nothing", "[core][policy]") {
  SimDriver sim(small_sim());
  cudaStream_t s = sim.create_stream();
  for (const bool short_blocks : {true, false}) {
    INFO("short blocks " << short_blocks);
    Pool pool = make_pool(sim, std::make_shared<Broken>(short_blocks));
    void* p = reinterpret_cast<void*>(0x1);
    // Blocks shorter than the request: refused before anything happens.
    // Placements outside the range: no range fits, so out of memory.
    CHECK(pool.try_allocate(&p, 10000, s) == (short_blocks ? cudaErrorInvalidValue : cudaErrorMemoryAllocation));
    CHECK(p == nullptr);
    const PoolStats stats = pool.stats();
    CHECK(stats.reserved_current == 0);
    CHECK(stats.used_current == 0);
    CHECK(stats.failed_allocations == 1);
    pool.check_invariants();
  }
  sim.destroy_stream(s);
}

TEST_CASE("the default policy keeps small blocks in the upper half of the VA, large ones below", "[core][policy]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.va_reserve = std::size_t{64} << 20;  // halves of 32 MiB
  const std::size_t half = std::size_t{32} << 20;
  for (const Policy policy : {Policy::default_policy, Policy::best_fit}) {
    INFO("policy " << static_cast<int>(policy));
    options.policy = policy;
    Pool pool(options);
    cudaStream_t s = sim.create_stream();
    auto* large = static_cast<char*>(pool.allocate(std::size_t{12} << 20, s));
    auto* small = static_cast<char*>(pool.allocate(4096, s));
    if (policy == Policy::default_policy) {
      CHECK(small - large == static_cast<std::ptrdiff_t>(half));  // the VA's start, and its middle
      // The lower half holds two 12 MiB blocks; a third goes above rather than fail.
      auto* second = static_cast<char*>(pool.allocate(std::size_t{12} << 20, s));
      auto* third = static_cast<char*>(pool.allocate(std::size_t{12} << 20, s));
      CHECK(second - large == (std::ptrdiff_t{12} << 20));
      CHECK(third - large >= static_cast<std::ptrdiff_t>(half));
      pool.check_invariants();
      pool.deallocate(second, s);
      pool.deallocate(third, s);
    } else {
      CHECK(small - large == (std::ptrdiff_t{12} << 20));  // right after it
    }
    pool.deallocate(small, s);
    pool.deallocate(large, s);
    pool.check_invariants();
    sim.destroy_stream(s);
  }
}
