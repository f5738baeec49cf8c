// Bad input on sova::Pool, on the simulation: a stream value that is no
// stream, and a size the pool can never hold, are refused before anything
// changes — no stream state made, no cache flushed or memory released, every
// statistic as it was (docs/runtime-errors.md, "Bad input, route by route").
// The out-of-memory message names the pool's limit as the user set it.
#include "core/sim_pool_fixture.hpp"
#include "support/stats_changes.hpp"

#include "core/stream_registry.hpp"

#include <cstdint>
#include <string>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

cudaStream_t stream_value(std::uintptr_t value) { return reinterpret_cast<cudaStream_t>(value); }

/// Values that name no stream of the simulation: misaligned ones (which the
/// registry's special keys would otherwise take for the legacy stream:
/// 12345 and 54321 end in binary 001), and an aligned one never created.
const std::uintptr_t kNoStreams[] = {12345, 54321, 99999, 0x7000};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("bad input: an allocation on a value that is no stream is refused, nothing made", "[core][bad_input]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  void* kept = pool.allocate(kMiB, nullptr);
  pool.deallocate(kept, nullptr);  // something cached, on one stream state
  for (std::uintptr_t value : kNoStreams) {
    INFO("stream value " << value);
    const PoolStats before = pool.stats();
    void* p = reinterpret_cast<void*>(1);
    CHECK(pool.try_allocate(&p, 4096, stream_value(value)) == cudaErrorInvalidResourceHandle);
    CHECK(p == nullptr);
    CHECK_STATS_UNCHANGED(before, pool.stats());
    // The same through the throwing call: sova::Error with the driver's code.
    try {
      (void)pool.allocate(4096, stream_value(value));
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.error() == cudaErrorInvalidResourceHandle);
    }
    CHECK_STATS_UNCHANGED(before, pool.stats());
  }
}

TEST_CASE("bad input: a free of a live block on a value that is no stream changes nothing", "[core][bad_input]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  void* block = pool.allocate(kMiB, nullptr);
  for (std::uintptr_t value : kNoStreams) {
    INFO("stream value " << value);
    const PoolStats before = pool.stats();
    CHECK(pool.try_deallocate(block, stream_value(value)) == cudaErrorInvalidResourceHandle);
    // No state for the refused value: stream_states (and active_streams,
    // which a new state raises at once) as they were.
    CHECK(pool.stats().stream_states == before.stream_states);
    CHECK(pool.stats().active_streams == before.active_streams);
    CHECK_STATS_UNCHANGED(before, pool.stats());
    CHECK(pool.block_size(block) == kMiB);  // still live
    try {
      pool.deallocate(block, stream_value(value));
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.error() == cudaErrorInvalidResourceHandle);
      CHECK(contains(e.what(), "names no stream"));
    }
  }
  pool.deallocate(block, nullptr);
}

TEST_CASE("bad input: a destroyed stream's handle is refused on a pool that never saw it", "[core][bad_input]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  void* block = pool.allocate(kMiB, nullptr);
  const cudaStream_t gone = sim.create_stream();
  sim.destroy_stream(gone);
  const PoolStats before = pool.stats();
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 4096, gone) == cudaErrorInvalidResourceHandle);
  CHECK(pool.try_deallocate(block, gone) == cudaErrorInvalidResourceHandle);
  CHECK_STATS_UNCHANGED(before, pool.stats());
  pool.deallocate(block, nullptr);
}

TEST_CASE("bad input: without stream checks a misaligned value is still refused", "[core][bad_input]") {
  // check_streams off asks the driver nothing, so an aligned value that
  // names no stream passes (docs/runtime-errors.md says why); a misaligned
  // one is told without the driver.
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.check_streams = false;
  Pool pool(options);
  void* block = pool.allocate(kMiB, nullptr);
  const PoolStats before = pool.stats();
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 4096, stream_value(12345)) == cudaErrorInvalidResourceHandle);
  CHECK(pool.try_deallocate(block, stream_value(54321)) == cudaErrorInvalidResourceHandle);
  CHECK_STATS_UNCHANGED(before, pool.stats());
  pool.deallocate(block, nullptr);
}

TEST_CASE("bad input: the registry makes no state for a refused stream", "[core][bad_input]") {
  SimDriver sim(small_sim());
  detail::StreamRegistry registry(sim, 0, /*check_streams=*/true);
  cudaError_t error = cudaSuccess;
  CHECK(registry.find(stream_value(12345), &error) == nullptr);
  CHECK(error == cudaErrorInvalidResourceHandle);
  error = cudaSuccess;
  CHECK(registry.find(stream_value(0x7000), &error) == nullptr);
  CHECK(error == cudaErrorInvalidResourceHandle);
  CHECK(registry.count() == 0);
  CHECK(registry.active() == 0);
  // The implicit handles and a live stream get their states as before.
  const cudaStream_t s = sim.create_stream();
  CHECK(registry.find(nullptr) != nullptr);
  CHECK(registry.find(cudaStreamPerThread) != nullptr);
  CHECK(registry.find(s) != nullptr);
  CHECK(registry.count() == 3);
  sim.destroy_stream(s);
}

TEST_CASE("bad input: beyond max_size is refused with the cache kept", "[core][bad_input]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.max_size = 64 * kMiB;
  options.release_threshold = ~std::uint64_t{0};  // keep what is freed
  Pool pool(options);
  void* a = pool.allocate(kMiB, nullptr);
  void* b = pool.allocate(3 * kMiB, nullptr);
  pool.deallocate(b, nullptr);
  const PoolStats before = pool.stats();
  REQUIRE(before.cached_bytes > 0);
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 64 * kMiB + 1, nullptr) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  // Counted as a failed allocation, and nothing else moved: the cache was
  // not flushed, no memory released, no device synchronized.
  const PoolStats after = pool.stats();
  CHECK(after.failed_allocations == before.failed_allocations + 1);
  CHECK_STATS_UNCHANGED(before, after, "failed_allocations");
  // What fits still works, from the cache.
  void* c = pool.allocate(3 * kMiB, nullptr);
  CHECK(pool.stats().fast_path_hits == before.fast_path_hits + 1);
  pool.deallocate(c, nullptr);
  pool.deallocate(a, nullptr);
}

TEST_CASE("bad input: beyond the device is refused with the cache kept", "[core][bad_input]") {
  SimDriver sim(small_sim(256 * kMiB));
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  void* b = pool.allocate(8 * kMiB, nullptr);
  pool.deallocate(b, nullptr);
  const PoolStats before = pool.stats();
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 256 * kMiB + 1, nullptr) == cudaErrorMemoryAllocation);
  CHECK_STATS_UNCHANGED(before, pool.stats(), "failed_allocations");
}

TEST_CASE("bad input: the out-of-memory message says what limit the pool has", "[core][bad_input]") {
  SimDriver sim(small_sim(256 * kMiB));
  auto message = [&](const PoolOptions& options, std::size_t bytes) {
    Pool pool(options);
    try {
      (void)pool.allocate(bytes, nullptr);
    } catch (const OutOfMemory& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  PoolOptions unlimited = options_on(sim);
  const std::string none = message(unlimited, 512 * kMiB);
  INFO(none);
  CHECK_FALSE(contains(none, "max size 0 B"));
  CHECK(contains(none, "no max size"));
  CHECK(contains(none, "larger than"));
  PoolOptions limited = options_on(sim);
  limited.max_size = 64 * kMiB;
  const std::string some = message(limited, 65 * kMiB);
  INFO(some);
  CHECK(contains(some, "max size 67108864 B"));
  CHECK(contains(some, "larger than"));
}

TEST_CASE("bad input: an exhausted device refuses after the pool gave back its free memory", "[core][bad_input]") {
  // What fits the pool's limits but not the device now (another pool holds
  // the rest) is refused after the ladder's last steps: this pool's free
  // memory released, the device synchronized — the attempt's point, so
  // reserved_current, chunks_unmapped and device_synchronizes may move. The
  // calls' counts, the live blocks and their contents stay as they were.
  SimDriver sim(small_sim(64 * kMiB));
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool other(options);
  Pool pool(options);
  void* held = other.allocate(40 * kMiB, nullptr);
  void* live = pool.allocate(2 * kMiB, nullptr);
  void* cached = pool.allocate(8 * kMiB, nullptr);
  pool.deallocate(cached, nullptr);
  const PoolStats before = pool.stats();
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 30 * kMiB, nullptr) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  const PoolStats after = pool.stats();
  CHECK(after.failed_allocations == before.failed_allocations + 1);
  CHECK(after.allocations == before.allocations);
  CHECK(after.deallocations == before.deallocations);
  CHECK(after.live_blocks == before.live_blocks);
  CHECK(after.used_current == before.used_current);
  CHECK(after.stream_states == before.stream_states);
  CHECK(after.reserved_current <= before.reserved_current);
  CHECK(pool.block_size(live) == 2 * kMiB);
  pool.deallocate(live, nullptr);
  other.deallocate(held, nullptr);
}

TEST_CASE("bad input: sleep, wake and stream_synchronized refuse a value that is no stream", "[core][bad_input]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  void* block = pool.allocate(kMiB, nullptr);
  const PoolStats before = pool.stats();
  for (std::uintptr_t value : kNoStreams) {
    INFO("stream value " << value);
    CHECK(pool.sleep(SleepMode::backup, stream_value(value)) != cudaSuccess);
    CHECK_FALSE(pool.asleep());
    CHECK_THROWS_AS(pool.stream_synchronized(stream_value(value)), Error);
    CHECK_STATS_UNCHANGED(before, pool.stats());
  }
  REQUIRE(pool.sleep(SleepMode::backup, nullptr) == cudaSuccess);
  const PoolStats asleep = pool.stats();
  for (std::uintptr_t value : kNoStreams) {
    INFO("stream value " << value);
    CHECK(pool.wake(stream_value(value)) != cudaSuccess);
    CHECK(pool.asleep());
    CHECK_STATS_UNCHANGED(asleep, pool.stats());
  }
  REQUIRE(pool.wake(nullptr) == cudaSuccess);
  pool.deallocate(block, nullptr);
}
