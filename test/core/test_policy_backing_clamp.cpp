// A custom policy's backing() answer is clamped to
// [request, block size] as include/sova/placement.hpp promises, whatever it
// is. A huge answer (SIZE_MAX) once wrapped to 0 when rounded up to 512, so
// the pool handed out a block with nothing backed under it.
#include "core/sim_pool_fixture.hpp"

#include <sova/placement.hpp>

#include <cstdint>
#include <cstring>
#include <memory>

using namespace sova;
using namespace sova::test;

namespace {

// Exact sizes at the range's start; backing() answers a fixed value.
class FixedBacking final : public PlacementPolicy {
 public:
  explicit FixedBacking(std::size_t answer) : answer_(answer) {}
  const char* name() const noexcept override { return "fixed_backing"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return (bytes + 511) / 512 * 512; }
  std::size_t backing(std::size_t, std::size_t) const noexcept override { return answer_; }
  std::size_t place(FreeRange range, std::size_t size, std::size_t) const noexcept override {
    return size <= range.size ? range.offset : kNoFit;
  }

 private:
  std::size_t answer_;
};

}  // namespace

TEST_CASE("a custom policy's backing() beyond the block is clamped to the block", "[core][policy][issue17]") {
  // Values that wrap when rounded up to 512, and ones that do not.
  const std::size_t answer = GENERATE(std::size_t{SIZE_MAX}, std::size_t{SIZE_MAX - 100}, std::size_t{SIZE_MAX - 511},
                                      std::size_t{1} << 40, std::size_t{0});
  INFO("backing() answers " << answer);
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.policy = Policy::custom;
  options.placement = std::make_shared<FixedBacking>(answer);
  Pool pool(options);
  cudaStream_t s = sim.create_stream();

  const std::size_t bytes = 254823;  // the size: not a multiple of 512
  auto* p = static_cast<unsigned char*>(pool.allocate(bytes, s));
  REQUIRE(p != nullptr);
  // The whole request is backed: at least one granule reserved, the invariant
  // checker agrees, and every byte can be written (the sim faults otherwise).
  CHECK(pool.stats().reserved_current >= bytes);
  pool.check_invariants();
  sim.stream_synchronize(s);
  std::memset(p, 0x5a, bytes);
  CHECK(p[bytes - 1] == 0x5a);
  pool.deallocate(p, s);
  pool.check_invariants();
  sim.destroy_stream(s);
}
