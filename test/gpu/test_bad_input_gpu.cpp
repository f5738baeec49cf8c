// Bad input on the GPU, as the simulation's [bad_input] tests check it
// (test/core/test_bad_input.cpp, test/capi/test_capi_bad_input.cpp): a stream
// value not aligned like a pointer is refused on the allocation and free
// routes without asking the driver (no driver could be asked safely about
// it), with no stream state made; a request beyond maxSize is refused with
// the pool's cache kept. Every statistic compared (stats_changes.hpp).
// Suite 'gpu' (one GPU).
#include "gpu/scenario_checks.hpp"
#include "support/catch.hpp"
#include "support/stats_changes.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

using namespace sova::scenario;

namespace {

cudaStream_t stream_value(std::uintptr_t value) { return reinterpret_cast<cudaStream_t>(value); }

sovaMemPool_t keeping_pool(std::size_t max_size) {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.device = 0;
  props.maxSize = max_size;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  std::uint64_t keep = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  return pool;
}

}  // namespace

TEST_CASE("bad input on the GPU: a misaligned stream value is refused, no stream state made", "[bad-args]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0);
  sovaMemPool_t pool = keeping_pool(0);
  void* block = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&block, kMiB, pool, s) == cudaSuccess);
  for (const std::uintptr_t value : {std::uintptr_t{12345}, std::uintptr_t{54321}}) {
    INFO("stream value " << value);
    const sovaMemPoolStats before = stats(pool);
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, 4096, pool, stream_value(value)) == cudaErrorInvalidResourceHandle);
    CHECK(p == nullptr);
    CHECK(sovaFreeAsync(block, stream_value(value)) == cudaErrorInvalidResourceHandle);
    CHECK_STATS_UNCHANGED(before, stats(pool));
  }
  CHECK(sovaFreeAsync(block, s) == cudaSuccess);
  s.sync();
  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("bad input on the GPU: beyond maxSize is refused with the cache kept", "[bad-args]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0);
  sovaMemPool_t pool = keeping_pool(64 * kMiB);
  void* cached = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&cached, 8 * kMiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(cached, s) == cudaSuccess);
  s.sync();
  const sovaMemPoolStats before = stats(pool);
  void* p = nullptr;
  CHECK(sovaMallocFromPoolAsync(&p, 64 * kMiB + 1, pool, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  const sovaMemPoolStats after = stats(pool);
  CHECK(after.failedAllocations == before.failedAllocations + 1);
  CHECK_STATS_UNCHANGED(before, after, "failedAllocations");
  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
}
