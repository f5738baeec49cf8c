// C API: sovaMemPoolSleep / Wake / IsAsleep / ReleaseSleepHostMemory on the
// process's simulation: a round trip, the statistics, the codes and messages.
#include "capi/capi_test_util.hpp"
#include "capi/raw_enums.h"
#include "support/capi_stats.hpp"

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

using namespace sova::capi_test;
using sova::test::stats_of;

namespace {

int asleep(sovaMemPool_t pool) {
  int value = -1;
  REQUIRE(sovaMemPoolIsAsleep(pool, &value) == cudaSuccess);
  return value;
}

bool last_error_says(const char* words) {
  const std::string message = sovaGetLastErrorMessage();
  INFO(message);
  return message.find(words) != std::string::npos;
}

/// A value no stream of the simulation has.
cudaStream_t not_a_stream() { return reinterpret_cast<cudaStream_t>(std::uintptr_t{0x7777770}); }

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

namespace {

/// Reads the last backup of [p, p + bytes) piece by piece through
/// sovaMemPoolGetSleepBackup; the bytes found, fewer where it holds none.
std::string backup_of(sovaMemPool_t pool, const void* p, std::size_t bytes) {
  std::string out;
  while (out.size() < bytes) {
    const void* host = reinterpret_cast<const void*>(std::uintptr_t{1});
    std::size_t there = 12345;
    REQUIRE(sovaMemPoolGetSleepBackup(pool, static_cast<const char*>(p) + out.size(), bytes - out.size(), &host,
                                      &there) == cudaSuccess);
    CHECK((host == nullptr) == (there == 0));
    if (host == nullptr) break;
    REQUIRE(there <= bytes - out.size());
    out.append(static_cast<const char*>(host), there);
  }
  return out;
}

}  // namespace

TEST_CASE("capi: sovaMemPoolGetSleepBackup reads the last backup, across wake until the next sleep or release",
          "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  const std::size_t n = 3 * MiB + 5;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, n, pool, stream) == cudaSuccess);
  std::memset(p, 0x3c, n);
  CHECK(backup_of(pool, p, n).empty());  // no sleep yet

  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  CHECK(backup_of(pool, p, n) == std::string(n, '\x3c'));
  CHECK(backup_of(pool, static_cast<char*>(p) + 100, 7) == std::string(7, '\x3c'));  // inside the block
  int outside = 0;
  CHECK(backup_of(pool, &outside, 4).empty());
  CHECK(backup_of(pool, static_cast<char*>(p) + n, 1).empty());  // past the block: not backed up

  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);
  REQUIRE(cudaSuccess == sim().stream_synchronize(stream));
  std::memset(p, 0x11, n);  // the device changes; the backup is what the sleep copied
  CHECK(backup_of(pool, p, n) == std::string(n, '\x3c'));

  REQUIRE(sovaMemPoolReleaseSleepHostMemory(pool) == cudaSuccess);
  CHECK(backup_of(pool, p, n).empty());
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  CHECK(backup_of(pool, p, n) == std::string(n, '\x11'));
  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepDiscard, stream) == cudaSuccess);
  CHECK(backup_of(pool, p, n).empty());  // the last sleep discarded
  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);

  const void* host = nullptr;
  std::size_t there = 0;
  CHECK(sovaMemPoolGetSleepBackup(pool, p, n, nullptr, &there) == cudaErrorInvalidValue);
  CHECK(last_error_says("host is NULL"));
  CHECK(sovaMemPoolGetSleepBackup(pool, p, n, &host, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetSleepBackup(nullptr, p, n, &host, &there) == cudaErrorInvalidValue);
  REQUIRE(cudaSuccess == sim().stream_synchronize(stream));
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: sovaSleepDiscardZeroed drops the contents and wake zeroes the live block", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB + 77, pool, stream) == cudaSuccess);
  std::memset(p, 0x5a, 3 * MiB + 77);
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepDiscardZeroed, stream) == cudaSuccess);
  CHECK(asleep(pool) == 1);
  CHECK(stats_of(pool).sleepHostBytes == 0);
  REQUIRE(sovaMemPoolWakeSynchronize(pool, stream) == cudaSuccess);  // the host may read at once
  const auto* bytes = static_cast<const unsigned char*>(p);
  bool zero = true;
  for (std::size_t i = 0; i < 3 * MiB + 77; ++i) zero = zero && bytes[i] == 0;
  CHECK(zero);
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: sleep and wake refuse bad input and change nothing", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  CHECK(sovaMemPoolSleep(nullptr, sovaSleepBackup, stream) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolWake(nullptr, stream) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolReserveSleepBackup(nullptr, 1) == cudaErrorInvalidValue);
  CHECK(raw_sleep(pool, 5, stream) == cudaErrorInvalidValue);
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

TEST_CASE("capi: sleep and wake say which argument they refuse, and change nothing", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 2 * MiB, pool, stream) == cudaSuccess);
  std::memset(p, 0x3e, 2 * MiB);
  const sovaMemPoolStats awake = stats_of(pool);

  CHECK(sovaMemPoolSleep(nullptr, sovaSleepBackup, stream) == cudaErrorInvalidValue);
  CHECK(last_error_says("sovaMemPoolSleep: pool is NULL"));
  CHECK(sovaMemPoolWake(nullptr, stream) == cudaErrorInvalidValue);
  CHECK(last_error_says("sovaMemPoolWake: pool is NULL"));
  CHECK(sovaMemPoolWakeSynchronize(nullptr, stream) == cudaErrorInvalidValue);
  CHECK(last_error_says("pool is NULL"));
  CHECK(sovaMemPoolIsAsleep(pool, nullptr) == cudaErrorInvalidValue);
  CHECK(last_error_says("asleep is NULL"));
  const auto imported = reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x12340d});  // an imported pool's tag
  CHECK(sovaMemPoolSleep(imported, sovaSleepBackup, stream) == cudaErrorInvalidValue);
  CHECK(last_error_says("imported pool cannot sleep"));
  {
    sovaMemPool_t gone = nullptr;
    const sovaMemPoolProps props = props_on(0);
    REQUIRE(sovaMemPoolCreate(&gone, &props) == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(gone) == cudaSuccess);
    CHECK(sovaMemPoolSleep(gone, sovaSleepDiscard, stream) == cudaErrorInvalidValue);
    CHECK(last_error_says("not a live sova pool"));
    CHECK(sovaMemPoolReserveSleepBackup(gone, MiB) == cudaErrorInvalidValue);
    CHECK(last_error_says("not a live sova pool"));
  }
  // Any int a C caller may pass for the mode.
  for (const int mode : {3, 5, -1, 1 << 30}) {
    CHECK(raw_sleep(pool, mode, stream) == cudaErrorInvalidValue);
    CHECK(last_error_says("is none of sovaSleepBackup (0), sovaSleepDiscard (1), sovaSleepDiscardZeroed (2)"));
  }
  CHECK(asleep(pool) == 0);

  // A stream the driver does not know: its error, before anything changes.
  CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, not_a_stream()) == cudaErrorInvalidResourceHandle);
  CHECK(last_error_says("is not a stream the driver knows"));
  CHECK(asleep(pool) == 0);
  CHECK(stats_of(pool).reservedCurrent == awake.reservedCurrent);
  CHECK(stats_of(pool).sleepHostBytes == 0);

  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  // Before: a wake on a stream that is none made the memory and restored it
  // synchronously, and reported success.
  CHECK(sovaMemPoolWake(pool, not_a_stream()) == cudaErrorInvalidResourceHandle);
  CHECK(last_error_says("sovaMemPoolWake: stream"));
  CHECK(sovaMemPoolWakeSynchronize(pool, not_a_stream()) == cudaErrorInvalidResourceHandle);
  CHECK(asleep(pool) == 1);
  CHECK(stats_of(pool).asleepBytes == awake.reservedCurrent);
  // Asleep already: the stream is checked all the same.
  CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, not_a_stream()) == cudaErrorInvalidResourceHandle);
  REQUIRE(sovaMemPoolWakeSynchronize(pool, stream) == cudaSuccess);
  CHECK(holds(p, 2 * MiB, 0x3e));
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: sovaMemPoolWakeSynchronize returns with the contents restored", "[capi][sleep]") {
  ScopedPool pool;
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, stream) == cudaSuccess);
  std::memset(p, 0x6d, 3 * MiB);
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  sim().delay_copies(std::chrono::milliseconds(50));  // a slow link: the restore lags behind the host
  REQUIRE(sovaMemPoolWakeSynchronize(pool, stream) == cudaSuccess);
  sim().delay_copies(std::chrono::microseconds(0));
  CHECK(asleep(pool) == 0);
  CHECK(holds(p, 3 * MiB, 0x6d));
  // Awake already: only the wait.
  CHECK(sovaMemPoolWakeSynchronize(pool, stream) == cudaSuccess);
  // sovaMemPoolWake returns before the restore is done: the stream orders it.
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
  sim().delay_copies(std::chrono::milliseconds(300));  // long enough for a host stalled on a busy machine
  REQUIRE(sovaMemPoolWake(pool, stream) == cudaSuccess);
  sim().delay_copies(std::chrono::microseconds(0));
  // Not read while the restore writes (a race, which TSan reports): the
  // stream still waiting on it says the restore was not done at return.
  CHECK(sim().stream_query(stream) == cudaErrorNotReady);
  stream.synchronize();
  CHECK(holds(p, 3 * MiB, 0x6d));
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: sleepHostBudget and sovaMemPoolSleepPinAhead: pinned ahead, a sleep beyond refused, given back",
          "[capi][sleep][pin_ahead]") {
  sovaMemPoolProps props = props_on(0);
  props.flags = sovaMemPoolSleepPinAhead;
  props.sleepHostBudget = 2 * MiB;
  ScopedPool pool(props);
  ScopedStream stream;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 5 * MiB, pool, stream) == cudaSuccess);
  std::memset(p, 0x2b, 5 * MiB);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (stats_of(pool).sleepPinAheadBytes != 2 * MiB && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const sovaMemPoolStats pinned = stats_of(pool);
  CHECK(pinned.sleepPinAheadBytes == 2 * MiB);  // the budget, not the 6 MiB reserved
  CHECK(pinned.sleepHostBytes == 2 * MiB);
  CHECK(pinned.sleepHostBudget == 2 * MiB);
  CHECK(pinned.sleepPinAheadTarget == 2 * MiB);
  CHECK(pinned.sleepPinAheadFailures == 0);

  CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaErrorMemoryAllocation);
  CHECK(last_error_says("budget"));
  CHECK(last_error_says("the pool is awake as it was"));
  CHECK(asleep(pool) == 0);
  CHECK(stats_of(pool).sleepBudgetRefusals == 1);
  CHECK(stats_of(pool).reservedCurrent == pinned.reservedCurrent);
  CHECK(holds(p, 5 * MiB, 0x2b));
  CHECK(sovaMemPoolReserveSleepBackup(pool, 4 * MiB) == cudaErrorMemoryAllocation);
  CHECK(last_error_says("budget"));
  CHECK(stats_of(pool).sleepBudgetRefusals == 2);

  REQUIRE(sovaMemPoolReleaseSleepHostMemory(pool) == cudaSuccess);
  CHECK(stats_of(pool).sleepHostBytes == 0);
  CHECK(stats_of(pool).sleepPinAheadTarget == 0);  // held until the pool grows
  REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
}

TEST_CASE("capi: a sleep or a reservation whose host memory is refused says which limit, the pool awake",
          "[capi][sleep]") {
  struct Refusal {
    const char* what;
    void (*arm)(int n);
    const char* words;
  };
  const Refusal refusals[] = {
      {"a mapping refused", [](int n) { sim().fail_host_map_at(n); }, "the host refused memory for the backup"},
      {"a lock refused", [](int n) { sim().fail_host_register_at(n); }, "ulimit -l: "},
  };
  for (const Refusal& r : refusals) {
    DYNAMIC_SECTION(r.what) {
      ScopedPool pool;
      ScopedStream stream;
      void* p = nullptr;
      REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, stream) == cudaSuccess);
      std::memset(p, 0x3c, 3 * MiB);
      r.arm(1);
      CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaErrorMemoryAllocation);
      r.arm(0);
      CHECK(last_error_says(r.words));
      CHECK(last_error_says("the pool is awake as it was"));
      CHECK(asleep(pool) == 0);
      CHECK(stats_of(pool).sleepHostBytes == 0);
      r.arm(1);
      CHECK(sovaMemPoolReserveSleepBackup(pool, 3 * MiB) == cudaErrorMemoryAllocation);
      r.arm(0);
      CHECK(last_error_says(r.words));
      CHECK(last_error_says("the memory held is as before"));
      // Not refused: the sleep goes through, the contents come back.
      REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, stream) == cudaSuccess);
      REQUIRE(sovaMemPoolWakeSynchronize(pool, stream) == cudaSuccess);
      const auto* bytes = static_cast<const unsigned char*>(p);
      bool same = true;
      for (std::size_t i = 0; i < 3 * MiB; ++i) same = same && bytes[i] == 0x3c;
      CHECK(same);
      REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
    }
  }
}
