// C API: bad input is refused before anything changes, and the message says
// what was wrong and what to do (docs/runtime-errors.md, "Bad input, route by
// route"): a stream value that is no stream, on every allocation and free
// route; a request beyond the pool's max size; a destroyed, NULL or made-up
// pool handle; sovaLogStart without a path, with a file it cannot open, or
// while a log runs.
#include "capi/capi_test_util.hpp"
#include "support/capi_stats.hpp"
#include "support/stats_changes.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include <unistd.h>

using namespace sova::capi_test;
using sova::test::stats_of;

namespace {

std::string last() { return sovaGetLastErrorMessage(); }
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
cudaStream_t stream_value(std::uintptr_t value) { return reinterpret_cast<cudaStream_t>(value); }

/// A pool that keeps what is freed: its figures move only with the calls made.
void keep_all(sovaMemPool_t pool) {
  std::uint64_t keep = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
}

}  // namespace

TEST_CASE("capi bad input: an allocation on a value that is no stream is refused on every route",
          "[capi][bad_input]") {
  ScopedPool pool;
  keep_all(pool);
  ScopedStream s;
  void* warm = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&warm, MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(warm, s) == cudaSuccess);
  for (const std::uintptr_t value : {std::uintptr_t{54321}, std::uintptr_t{12345}, std::uintptr_t{0x7000}}) {
    INFO("stream value " << value);
    const sovaMemPoolStats before = stats_of(pool);
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync(&p, 4096, pool, stream_value(value)) == cudaErrorInvalidResourceHandle);
    CHECK(p == nullptr);
    INFO(last());
    CHECK(contains(last(), "sovaMallocFromPoolAsync: allocating 4096 bytes on stream"));
    CHECK(contains(last(), "names no stream"));
    CHECK_STATS_UNCHANGED(before, stats_of(pool));
    p = reinterpret_cast<void*>(0x1);
    CHECK(sovaMallocFromPoolAsync_ptsz(&p, 4096, pool, stream_value(value)) == cudaErrorInvalidResourceHandle);
    CHECK(p == nullptr);
    CHECK_STATS_UNCHANGED(before, stats_of(pool));
  }
}

TEST_CASE("capi bad input: sovaMallocAsync refuses a value that is no stream, with the same words",
          "[capi][bad_input]") {
  sim();
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocAsync(&p, 4096, stream_value(12345)) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);
  INFO(last());
  CHECK(contains(last(), "names no stream"));
}

TEST_CASE("capi bad input: a free on a value that is no stream changes nothing", "[capi][bad_input]") {
  ScopedPool pool;
  keep_all(pool);
  ScopedStream s;
  void* block = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&block, MiB, pool, s) == cudaSuccess);
  for (const std::uintptr_t value : {std::uintptr_t{99999}, std::uintptr_t{54321}, std::uintptr_t{0x7000}}) {
    INFO("stream value " << value);
    const sovaMemPoolStats before = stats_of(pool);
    CHECK(sovaFreeAsync(block, stream_value(value)) == cudaErrorInvalidResourceHandle);
    INFO(last());
    CHECK(contains(last(), "sovaFreeAsync: freeing"));
    CHECK(contains(last(), "names no stream"));
    CHECK(contains(last(), "the block stays live"));
    // No stream state for the refused value (streamStates, activeStreams).
    CHECK(stats_of(pool).streamStates == before.streamStates);
    CHECK(stats_of(pool).activeStreams == before.activeStreams);
    CHECK_STATS_UNCHANGED(before, stats_of(pool));
  }
  CHECK(sovaFreeAsync(block, s) == cudaSuccess);
}

TEST_CASE("capi bad input: beyond maxSize is refused with the cache kept and the pool's figures said",
          "[capi][bad_input]") {
  ScopedPool pool(0, 64 * MiB);
  keep_all(pool);
  ScopedStream s;
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&a, MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&b, 3 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(b, s) == cudaSuccess);
  const sovaMemPoolStats before = stats_of(pool);
  REQUIRE(before.cachedBytes > 0);
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&p, 64 * MiB + 1, pool, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  const sovaMemPoolStats after = stats_of(pool);
  CHECK(after.failedAllocations == before.failedAllocations + 1);
  CHECK_STATS_UNCHANGED(before, after, "failedAllocations");
  INFO(last());
  CHECK(contains(last(), "allocating 67108865 bytes failed: cudaErrorMemoryAllocation (out of memory): "));
  CHECK(contains(last(), "larger than this pool can ever hold"));
  CHECK(contains(last(), "max size 67108864 B"));
  CHECK(contains(last(), "cached 3145728 B"));
  CHECK(sovaFreeAsync(a, s) == cudaSuccess);
}

TEST_CASE("capi bad input: out of memory on a pool with no limit says so", "[capi][bad_input]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  CHECK(sovaMallocFromPoolAsync(&p, std::size_t{2} << 30, pool, s) == cudaErrorMemoryAllocation);
  INFO(last());
  CHECK(contains(last(), "no max size"));
  CHECK_FALSE(contains(last(), "max size 0 B"));
}

TEST_CASE("capi bad input: a refused pool handle says what it was", "[capi][bad_input]") {
  sovaMemPool_t gone = nullptr;
  {
    ScopedPool pool;
    gone = pool.get();
  }
  void* p = nullptr;
  CHECK(sovaMallocFromPoolAsync(&p, 4096, gone, nullptr) == cudaErrorInvalidValue);
  INFO(last());
  CHECK(contains(last(), "sovaMallocFromPoolAsync: pool "));
  CHECK(contains(last(), "was destroyed (sovaMemPoolDestroy)"));
  sovaMemPoolStats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.structSize = sizeof stats;
  CHECK(sovaMemPoolGetStats(gone, &stats) == cudaErrorInvalidValue);
  CHECK(contains(last(), "was destroyed"));
  CHECK(sovaMemPoolDestroy(gone) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaMemPoolDestroy: pool "));
  CHECK(contains(last(), "was destroyed"));
  // Refused under the lifetime mutex: the words take no lock.
  CHECK(sovaDeviceSetMemPool(0, gone) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaDeviceSetMemPool: pool "));
  CHECK(contains(last(), "was destroyed"));
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaMemPoolTrimTo: pool is NULL; pass a pool from sovaMemPoolCreate"));
  const auto made_up = reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x1234560});
  CHECK(sovaMallocFromPoolAsync(&p, 4096, made_up, nullptr) == cudaErrorInvalidValue);
  CHECK(contains(last(), "no sova call made that handle"));
  sovaMemPool_t default_pool = nullptr;
  REQUIRE(sovaDeviceGetDefaultMemPool(&default_pool, 0) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(default_pool) == cudaErrorInvalidValue);
  CHECK(contains(last(), "default pool cannot be destroyed"));
}

TEST_CASE("capi bad input: sovaLogStart says why it refused", "[capi][bad_input]") {
  CHECK(sovaLogStart(nullptr) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaLogStart: no path given (NULL)"));
  CHECK(sovaLogStart("") == cudaErrorInvalidValue);
  CHECK(contains(last(), "no path given (empty)"));
  CHECK(sovaLogStart("/nonexistent-sova-dir/log.csv") == cudaErrorInvalidValue);
  INFO(last());
  CHECK(contains(last(), "cannot open /nonexistent-sova-dir/log.csv for writing (No such file or directory)"));
  char path[64];
  std::snprintf(path, sizeof path, "/tmp/sova-bad-input-%d.csv", static_cast<int>(::getpid()));
  REQUIRE(sovaLogStart(path) == cudaSuccess);
  CHECK(sovaLogStart("/tmp/sova-bad-input-other.csv") == cudaErrorInvalidValue);
  CHECK(contains(last(), std::string("a log is already running, to ") + path + "; stop it first (sovaLogStop)"));
  CHECK(sovaLogStop() == cudaSuccess);
  std::remove(path);
}
