// The PyTorch adapter's private-pool segment source and its memory limit on
// the simulation (sova_torch.h: sova_torch_malloc_pool_segment,
// sova_torch_set_memory_fraction), called as sova's native PyTorch backend
// calls them.
#include "support/capi_stats.hpp"
#include "support/catch.hpp"

#include "sova_torch.h"
#include "torch_adapter/adapter_sim.hpp"

#include <sova/sim.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

using sova::test::stats_of;
using sova::torch_adapter_test::sim;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::size_t device_total() {
  std::size_t free_bytes = 0, total_bytes = 0;
  REQUIRE(sim().memory_info(0, &free_bytes, &total_bytes) == cudaSuccess);
  return total_bytes;
}

std::uint64_t g_external = 0;
std::uint64_t external_reserved(int) { return g_external; }

/// Leaves device 0 without a limit or external figure, whatever a test did.
struct NoLimitAfter {
  ~NoLimitAfter() {
    sova_torch_set_memory_fraction(1.0, 0);
    sova_torch_set_external_reserved_fn(nullptr);
    g_external = 0;
  }
};

}  // namespace

TEST_CASE("torch adapter: a private pool's segments come from the segment pool, apart from the device's pool",
          "[torch_adapter][limits]") {
  cudaStream_t s = sim().create_stream();
  void* warm = sova_torch_malloc_nothrow(MiB, 0, s);
  REQUIRE(warm != nullptr);
  sovaMemPool_t device_pool = sova_torch_pool(0);
  REQUIRE(device_pool != nullptr);
  const std::uint64_t used_before = stats_of(device_pool).usedCurrent;

  void* segment = sova_torch_malloc_pool_segment(4 * MiB, 0, s);
  INFO(sova_torch_last_error());
  REQUIRE(segment != nullptr);
  sovaMemPool_t segments = sova_torch_segment_pool(0);
  REQUIRE(segments != nullptr);
  CHECK(segments != device_pool);
  CHECK(stats_of(device_pool).usedCurrent == used_before);  // not the device pool's
  CHECK(stats_of(segments).usedCurrent == 4 * MiB);
  std::memset(segment, 0x3c, 4 * MiB);  // mapped host memory on the simulation

  sova_torch_free_pool_segment(segment, 4 * MiB, 0, s);
  CHECK(stats_of(segments).usedCurrent == 0);
  CHECK(stats_of(segments).reservedCurrent == 0);  // given back at the free: it holds its live segments

  // Under capture: allocated on the adapter's own stream, the capture intact.
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* captured = sova_torch_malloc_pool_segment(2 * MiB, 0, s);
  REQUIRE(captured != nullptr);
  bool capturing = false;
  REQUIRE(sim().stream_is_capturing(s, &capturing) == cudaSuccess);
  CHECK(capturing);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  CHECK(stats_of(segments).usedCurrent == 2 * MiB);
  sova_torch_free_pool_segment(captured, 2 * MiB, 0, s);
  CHECK(stats_of(segments).usedCurrent == 0);

  // A thread under a tag: the tag's pool, so that the segment sleeps with it.
  const int previous = sova_torch_set_tag(9);
  void* tagged = sova_torch_malloc_pool_segment(2 * MiB, 0, s);
  REQUIRE(tagged != nullptr);
  sovaMemPool_t tag_pool = sova_torch_tag_pool(9, 0);
  REQUIRE(tag_pool != nullptr);
  CHECK(stats_of(tag_pool).usedCurrent == 2 * MiB);
  CHECK(stats_of(segments).usedCurrent == 0);
  sova_torch_free_pool_segment(tagged, 2 * MiB, 0, s);
  CHECK(stats_of(tag_pool).usedCurrent == 0);
  (void)sova_torch_set_tag(previous);

  sova_torch_free_pool_segment(nullptr, 0, 0, s);  // NULL: nothing
  CHECK(sova_torch_malloc_pool_segment(MiB, 7, s) == nullptr);  // the sim has one device
  CHECK(std::string(sova_torch_last_error()).find("device 7") != std::string::npos);
  INFO(sova_torch_last_error());
  CHECK(sova_torch_malloc_pool_segment(MiB, 64, s) == nullptr);
  CHECK(std::string(sova_torch_last_error()).find("out of range") != std::string::npos);
  CHECK(sova_torch_segment_pool(-1) == nullptr);
  sova_torch_free(warm, MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  sim().destroy_stream(s);
}

TEST_CASE("torch adapter: the per-process memory fraction limits what the pools reserve, as PyTorch's does",
          "[torch_adapter][limits]") {
  NoLimitAfter restore;
  cudaStream_t s = sim().create_stream();
  CHECK(sova_torch_memory_fraction(0) == 1.0);
  CHECK(sova_torch_memory_limit(0) == UINT64_MAX);

  sova_torch_set_memory_fraction(0.25, 0);
  const std::uint64_t limit = device_total() / 4;
  CHECK(sova_torch_memory_fraction(0) == 0.25);
  CHECK(sova_torch_memory_limit(0) == limit);

  void* big = nullptr;
  REQUIRE(sova_torch_try_malloc(&big, limit - 64 * MiB, 0, s) == cudaSuccess);
  CHECK(sova_torch_reserved_bytes(0) <= limit);
  sovaTorchStats before;
  std::memset(&before, 0, sizeof before);
  before.pool.structSize = sizeof before.pool;
  REQUIRE(sova_torch_get_stats(0, &before) == cudaSuccess);
  void* over = nullptr;
  CHECK(sova_torch_try_malloc(&over, 128 * MiB, 0, s) == cudaErrorMemoryAllocation);
  CHECK(over == nullptr);
  const std::string message = sova_torch_last_error();
  CHECK(message.find("out of memory") != std::string::npos);
  CHECK(message.find("per-process memory fraction") != std::string::npos);
  sovaTorchStats after = before;
  REQUIRE(sova_torch_get_stats(0, &after) == cudaSuccess);
  CHECK(after.numOoms == before.numOoms + 1);
  CHECK(sova_torch_malloc_nothrow(128 * MiB, 0, s) == nullptr);
  CHECK_THROWS(sova_torch_malloc(128 * MiB, 0, s));
  void* fits = nullptr;
  REQUIRE(sova_torch_try_malloc(&fits, 32 * MiB, 0, s) == cudaSuccess);  // within what is left
  sova_torch_free(fits, 32 * MiB, 0, s);

  // Freed memory the pool still holds counts as reserved: a request that
  // would grow the pool beyond the limit releases it first and then fits.
  sova_torch_free(big, limit - 64 * MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  void* again = nullptr;
  REQUIRE(sova_torch_try_malloc(&again, limit - 16 * MiB, 0, s) == cudaSuccess);
  CHECK(sova_torch_reserved_bytes(0) <= limit);
  sova_torch_free(again, limit - 16 * MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);

  // Memory held outside the adapter's pools (the native backend's private pools) counts.
  sova_torch_set_external_reserved_fn(&external_reserved);
  g_external = limit - 8 * MiB;
  void* blocked = nullptr;
  CHECK(sova_torch_try_malloc(&blocked, 16 * MiB, 0, s) == cudaErrorMemoryAllocation);
  // ... but not for a private pool's segment: PyTorch checks its pools' growth itself.
  void* segment = sova_torch_malloc_pool_segment(16 * MiB, 0, s);
  CHECK(segment != nullptr);
  sova_torch_free_pool_segment(segment, 16 * MiB, 0, s);
  void* mem_pool_segment = sova_torch_malloc_segment(16 * MiB, 0, s);
  CHECK(mem_pool_segment != nullptr);
  sova_torch_free_segment(mem_pool_segment, 16 * MiB, 0, s);
  g_external = 0;
  REQUIRE(sova_torch_try_malloc(&blocked, 16 * MiB, 0, s) == cudaSuccess);
  sova_torch_free(blocked, 16 * MiB, 0, s);

  // Fraction 0: nothing more may be reserved; 1: no limit again.
  sova_torch_set_memory_fraction(0.0, 0);
  CHECK(sova_torch_memory_limit(0) == 0);
  CHECK(sova_torch_malloc_nothrow(MiB, 0, s) == nullptr);
  sova_torch_set_memory_fraction(1.0, 0);
  CHECK(sova_torch_memory_limit(0) == UINT64_MAX);
  void* free_again = sova_torch_malloc_nothrow(MiB, 0, s);
  CHECK(free_again != nullptr);
  sova_torch_free(free_again, MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  sim().destroy_stream(s);
}

TEST_CASE("torch adapter: a bad memory fraction or device is refused and changes nothing", "[torch_adapter][limits]") {
  NoLimitAfter restore;
  sova_torch_set_memory_fraction(0.5, 0);
  const std::uint64_t limit = sova_torch_memory_limit(0);
  CHECK_THROWS_AS(sova_torch_set_memory_fraction(1.5, 0), std::invalid_argument);
  CHECK_THROWS_AS(sova_torch_set_memory_fraction(-0.1, 0), std::invalid_argument);
  CHECK_THROWS_AS(sova_torch_set_memory_fraction(std::nan(""), 0), std::invalid_argument);
  CHECK_THROWS_AS(sova_torch_set_memory_fraction(0.5, 64), std::invalid_argument);
  CHECK_THROWS_AS(sova_torch_set_memory_fraction(0.5, -1), std::invalid_argument);
  CHECK(sova_torch_memory_fraction(0) == 0.5);
  CHECK(sova_torch_memory_limit(0) == limit);
  CHECK(sova_torch_memory_fraction(64) == 1.0);
  CHECK(sova_torch_memory_limit(-1) == UINT64_MAX);
  CHECK(sova_torch_reserved_bytes(64) == 0);
}
