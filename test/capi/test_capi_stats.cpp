// C API: sovaMemPoolGetStats — figures against what the test allocated, the
// size rule of the extensible struct, and bad input changing nothing.
#include "capi/capi_test_util.hpp"
#include "support/capi_stats.hpp"

#include <cstddef>

using namespace sova::capi_test;
using sova::test::stats_of;

TEST_CASE("capi: sovaMemPoolGetStats counts what was allocated", "[capi]") {
  ScopedPool pool;
  ScopedStream stream;
  const sovaMemPoolStats empty = stats_of(pool);
  CHECK(empty.structSize == sizeof(sovaMemPoolStats));
  CHECK(empty.usedCurrent == 0);
  CHECK(empty.liveBlocks == 0);
  CHECK(empty.allocations == 0);

  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&a, 3 * MiB, pool, stream) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&b, 1000, pool, stream) == cudaSuccess);
  sovaMemPoolStats s = stats_of(pool);
  CHECK(s.usedCurrent == 3 * MiB + 1000);
  CHECK(s.usedHigh == 3 * MiB + 1000);
  CHECK(s.liveBlocks == 2);
  CHECK(s.allocations == 2);
  CHECK(s.deallocations == 0);
  CHECK(s.reservedCurrent >= 4 * MiB);  // 2 MiB granules
  CHECK(s.reservedCurrent == reserved(pool));
  CHECK(s.chunksMapped >= 1);

  REQUIRE(sovaFreeAsync(a, stream) == cudaSuccess);
  s = stats_of(pool);
  CHECK(s.usedCurrent == 1000);
  CHECK(s.usedHigh == 3 * MiB + 1000);
  CHECK(s.liveBlocks == 1);
  CHECK(s.deallocations == 1);
  CHECK(s.cachedBytes >= 3 * MiB);
  // Same size again on the same stream: the stream's own cache.
  const std::uint64_t hits = s.fastPathHits;
  REQUIRE(sovaMallocFromPoolAsync(&a, 3 * MiB, pool, stream) == cudaSuccess);
  CHECK(stats_of(pool).fastPathHits == hits + 1);
  REQUIRE(sovaFreeAsync(a, stream) == cudaSuccess);
  REQUIRE(sovaFreeAsync(b, stream) == cudaSuccess);
  stream.synchronize();
}

TEST_CASE("capi: sovaMemPoolGetStats counts failed allocations", "[capi]") {
  ScopedPool pool(0, 8 * MiB);
  ScopedStream stream;
  void* p = nullptr;
  CHECK(sovaMallocFromPoolAsync(&p, 64 * MiB, pool, stream) == cudaErrorMemoryAllocation);
  const sovaMemPoolStats s = stats_of(pool);
  CHECK(s.failedAllocations == 1);
  CHECK(s.allocations == 0);
  CHECK(s.usedCurrent == 0);
}

TEST_CASE("capi: sovaMemPoolGetStats fills only what structSize holds", "[capi]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, MiB, pool, stream) == cudaSuccess);

  SECTION("an older caller's smaller struct: whole fields up to its size, nothing beyond") {
    sovaMemPoolStats s;
    std::memset(&s, 0xAB, sizeof s);
    // Holds structSize, reservedCurrent, reservedHigh, usedCurrent and half of usedHigh.
    s.structSize = offsetof(sovaMemPoolStats, usedHigh) + 4;
    REQUIRE(sovaMemPoolGetStats(pool, &s) == cudaSuccess);
    CHECK(s.structSize == offsetof(sovaMemPoolStats, usedHigh) + 4);  // the caller's, kept
    CHECK(s.usedCurrent == MiB);
    CHECK(s.reservedCurrent == reserved(pool));
    std::uint64_t untouched;
    std::memset(&untouched, 0xAB, sizeof untouched);
    CHECK(s.usedHigh == untouched);  // only partly inside structSize: not written
    CHECK(s.liveBlocks == untouched);
  }
  SECTION("a newer caller's larger struct: the known fields, the rest left as it was") {
    struct Larger {
      sovaMemPoolStats known;
      std::uint64_t future[4];
    } s;
    std::memset(&s, 0, sizeof s);
    s.known.structSize = sizeof s;
    s.future[0] = 42;
    REQUIRE(sovaMemPoolGetStats(pool, &s.known) == cudaSuccess);
    CHECK(s.known.structSize == sizeof s);
    CHECK(s.known.usedCurrent == MiB);
    CHECK(s.known.liveBlocks == 1);
    CHECK(s.future[0] == 42);
  }
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
  stream.synchronize();
}

TEST_CASE("capi: sovaMemPoolGetStats refuses bad input and changes nothing", "[capi]") {
  ScopedPool pool;
  sovaMemPoolStats s;
  std::memset(&s, 0x5A, sizeof s);
  s.structSize = sizeof s;
  const sovaMemPoolStats before = s;
  CHECK(sovaMemPoolGetStats(pool, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetStats(nullptr, &s) == cudaErrorInvalidValue);
  CHECK(std::memcmp(&s, &before, sizeof s) == 0);
  s.structSize = offsetof(sovaMemPoolStats, reservedCurrent) + 4;  // no whole field
  CHECK(sovaMemPoolGetStats(pool, &s) == cudaErrorInvalidValue);
  s.structSize = 0;
  CHECK(sovaMemPoolGetStats(pool, &s) == cudaErrorInvalidValue);

  SECTION("a destroyed pool's handle") {
    const sovaMemPool_t gone = pool.release();
    REQUIRE(sovaMemPoolDestroy(gone) == cudaSuccess);
    s.structSize = sizeof s;
    CHECK(sovaMemPoolGetStats(gone, &s) == cudaErrorInvalidValue);
  }
}

TEST_CASE("capi: sovaMemPoolGetStats reports the slow path's steps", "[capi]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3u << 20, pool, stream) == cudaSuccess);  // grows
  const sovaMemPoolStats s = stats_of(pool);
  CHECK(s.slowGrown == 1);
  CHECK(s.slowFromHeap + s.slowFromHeapAll + s.slowFromOtherStreams + s.slowWithWait + s.slowGrown +
            s.slowAfterSynchronize ==
        s.allocations - s.fastPathHits);
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}
