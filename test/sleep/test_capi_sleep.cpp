// C API: sovaMemPoolSleep / Wake / IsAsleep / ReleaseSleepHostMemory on the
// process's simulation: a round trip, the statistics, the codes and messages.
#include "capi/capi_test_util.hpp"
#include "support/capi_stats.hpp"

#include <cstring>
#include <string>

using namespace sova::capi_test;
using sova::test::stats_of;

namespace {

int asleep(sovaMemPool_t pool) {
  int value = -1;
  REQUIRE(sovaMemPoolIsAsleep(pool, &value) == cudaSuccess);
  return value;
}

}  // namespace

TEST_CASE("capi: a pool sleeps with backup and wakes with its contents at the same address", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 5 * MiB + 123, pool, stream) == cudaSuccess);
  std::memset(p, 0x5a, 5 * MiB + 123);
  const sovaMemPoolStats awake = stats_of(pool);
  CHECK(asleep(pool) == 0);

  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  CHECK(asleep(pool) == 1);
  const sovaMemPoolStats slept = stats_of(pool);
  CHECK(slept.asleepBytes == awake.reservedCurrent);
  CHECK(slept.reservedCurrent == 0);
  CHECK(slept.sleepHostBytes >= 5 * MiB + 123);

  void* q = nullptr;
  CHECK(sovaMallocFromPoolAsync(&q, 1000, pool, stream) == cudaErrorNotPermitted);
  CHECK(std::string(sovaGetLastErrorMessage()).find("asleep") != std::string::npos);
  CHECK(sovaMemPoolReleaseSleepHostMemory(pool) == cudaErrorNotPermitted);
  CHECK(std::string(sovaGetLastErrorMessage()).find("asleep") != std::string::npos);

  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);
  REQUIRE(cudaSuccess == sim().stream_synchronize(stream));
  CHECK(asleep(pool) == 0);
  const auto* bytes = static_cast<const unsigned char*>(p);
  bool same = true;
  for (std::size_t i = 0; i < 5 * MiB + 123; ++i) same = same && bytes[i] == 0x5a;
  CHECK(same);
  CHECK(stats_of(pool).reservedCurrent == awake.reservedCurrent);
  CHECK(stats_of(pool).asleepBytes == 0);
  CHECK(sovaMemPoolReleaseSleepHostMemory(pool) == cudaSuccess);
  CHECK(stats_of(pool).sleepHostBytes == 0);
  CHECK(sovaMemPoolReserveSleepBackup(pool, 3 * MiB) == cudaSuccess);
  CHECK(stats_of(pool).sleepHostBytes >= 3 * MiB);
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: sleep and wake refuse bad input and change nothing", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  CHECK(sovaMemPoolSleep(nullptr, sovaSleepBackup, stream) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolWake(nullptr, stream) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolReserveSleepBackup(nullptr, 1) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSleep(pool, static_cast<sovaSleepMode>(5), stream) == cudaErrorInvalidValue);
  CHECK(std::string(sovaGetLastErrorMessage()).find("sovaSleepBackup") != std::string::npos);
  CHECK(asleep(pool) == 0);
  CHECK(sovaMemPoolIsAsleep(pool, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolIsAsleep(nullptr, nullptr) == cudaErrorInvalidValue);
  // Discard, twice, and wake twice: idempotent.
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepDiscard, stream) == cudaSuccess);
  CHECK(sovaMemPoolSleep(pool, sovaSleepDiscard, stream) == cudaSuccess);
  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);
  CHECK(sovaMemPoolWake(pool, stream) == cudaSuccess);
}
