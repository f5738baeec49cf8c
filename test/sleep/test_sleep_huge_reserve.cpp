// reserve_sleep_backup of any size (Pool and sovaMemPoolReserveSleepBackup):
// against a budget, a size of 64 TiB or more (1 << 46, 1 << 62, SIZE_MAX) is
// the budget's refusal like any other size beyond it — counted in
// sleep_budget_refusals, the budget's message in the C API — never a pinning
// failure; without a budget such a size is refused as more than a pool
// holds, nothing pinned, nothing thrown.
#include "sleep/sleep_test_util.hpp"

#include "capi/capi_test_util.hpp"
#include "support/capi_stats.hpp"

#include <cstdint>
#include <string>

using namespace sova;
using namespace sova::sleep_test;

namespace {

constexpr std::size_t kHugeSizes[] = {std::size_t{1} << 46, (std::size_t{1} << 46) + 1, std::size_t{1} << 62,
                                      SIZE_MAX};

PoolOptions with_budget(SimDriver& sim, std::size_t budget) {
  PoolOptions o;
  o.driver = &sim;
  o.sleep_host_budget = budget;
  return o;
}

bool last_error_says(const char* words) {
  const std::string message = sovaGetLastErrorMessage();
  INFO(message);
  return message.find(words) != std::string::npos;
}

}  // namespace

TEST_CASE("reserve_sleep_backup of 64 TiB or more against a budget is the budget's refusal",
          "[sleep][budget][huge_reserve]") {
  SimDriver sim;
  Pool pool(with_budget(sim, 8 * MiB));
  std::uint64_t refusals = 0;
  for (const std::size_t bytes : kHugeSizes) {
    INFO("bytes " << bytes);
    CHECK(pool.reserve_sleep_backup(bytes) == cudaErrorMemoryAllocation);
    CHECK(pool.stats().sleep_budget_refusals == ++refusals);
  }
  CHECK(pool.reserve_sleep_backup(16 * MiB) == cudaErrorMemoryAllocation);  // as a size just beyond it
  CHECK(pool.stats().sleep_budget_refusals == ++refusals);
  CHECK(sim.counters().host_register_calls == 0);
  CHECK(pool.stats().sleep_host_bytes == 0);
  REQUIRE(pool.reserve_sleep_backup(8 * MiB) == cudaSuccess);  // within it: pinned
  CHECK(pool.stats().sleep_host_bytes == 8 * MiB);
  CHECK(pool.reserve_sleep_backup(SIZE_MAX) == cudaErrorMemoryAllocation);  // with memory held too
  CHECK(pool.stats().sleep_budget_refusals == ++refusals);
  CHECK(pool.stats().sleep_host_bytes == 8 * MiB);
}

TEST_CASE("reserve_sleep_backup of 64 TiB or more without a budget is refused, nothing pinned",
          "[sleep][budget][huge_reserve]") {
  SimDriver sim;
  Pool pool(with_budget(sim, 0));
  for (const std::size_t bytes : kHugeSizes) {
    INFO("bytes " << bytes);
    CHECK(pool.reserve_sleep_backup(bytes) == cudaErrorMemoryAllocation);
  }
  CHECK(sim.counters().host_register_calls == 0);  // refused before any pin was tried
  const PoolStats s = pool.stats();
  CHECK(s.sleep_budget_refusals == 0);  // no budget to refuse it
  CHECK(s.sleep_host_bytes == 0);

  // With memory held, what is left to pin is under 64 TiB: the size asked still is not.
  REQUIRE(pool.reserve_sleep_backup(8 * MiB) == cudaSuccess);
  const std::size_t pins = sim.counters().host_register_calls;
  for (const std::size_t bytes : kHugeSizes) {
    INFO("bytes " << bytes);
    CHECK(pool.reserve_sleep_backup(bytes) == cudaErrorMemoryAllocation);
  }
  CHECK(sim.counters().host_register_calls == pins);
  CHECK(pool.stats().sleep_host_bytes == 8 * MiB);
}

TEST_CASE("capi: sovaMemPoolReserveSleepBackup of 64 TiB or more says the budget, or the limit",
          "[capi][sleep][budget][huge_reserve]") {
  using sova::capi_test::props_on;
  using sova::capi_test::ScopedPool;
  using sova::test::stats_of;
  SECTION("against a budget: the budget's message, counted") {
    sovaMemPoolProps props = props_on(0);
    props.sleepHostBudget = 8 * MiB;
    ScopedPool pool(props);
    std::uint64_t refusals = 0;
    for (const std::size_t bytes : kHugeSizes) {
      INFO("bytes " << bytes);
      CHECK(sovaMemPoolReserveSleepBackup(pool, bytes) == cudaErrorMemoryAllocation);
      CHECK(last_error_says("more pinned host memory than the pool's budget allows"));
      CHECK(last_error_says("nothing was pinned"));
      CHECK_FALSE(last_error_says("pinning host memory failed"));
      CHECK(stats_of(pool).sleepBudgetRefusals == ++refusals);
    }
  }
  SECTION("without a budget: more than a pool holds, not a pinning failure") {
    ScopedPool pool(props_on(0));
    for (const std::size_t bytes : kHugeSizes) {
      INFO("bytes " << bytes);
      CHECK(sovaMemPoolReserveSleepBackup(pool, bytes) == cudaErrorMemoryAllocation);
      CHECK(last_error_says("64 TiB or more"));
      CHECK(last_error_says("nothing was pinned"));
      CHECK(stats_of(pool).sleepHostBytes == 0);
    }
  }
}
