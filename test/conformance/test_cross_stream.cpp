// Conformance: a block freed on stream A while A's work still uses it must
// not be overwritten by another stream's work, whatever the reuse settings.
//
// Stream A writes a tag, stays busy, then checks the tag and frees the block.
// Stream B allocates the same size at once and overwrites what it gets. If the
// pool handed B the block without ordering B after A, A's check counts
// mismatches (the negative control shows the check does catch that).
#include "conformance/pool_fixture.hpp"

#include <chrono>
#include <thread>

using namespace sova;
using namespace sova::test;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t kBytes = std::size_t{4} << 20;
constexpr std::uint32_t kTagA = 0xAAAA0001u;
constexpr std::uint32_t kTagB = 0xBBBB0002u;

void set_reuse(Pool& pool, bool opportunistic, bool internal) {
  int on = opportunistic ? 1 : 0;
  REQUIRE(pool.set_attribute(cudaMemPoolReuseAllowOpportunistic, &on) == cudaSuccess);
  on = internal ? 1 : 0;
  REQUIRE(pool.set_attribute(cudaMemPoolReuseAllowInternalDependencies, &on) == cudaSuccess);
}

}  // namespace

TEST_CASE("negative control: unordered reuse across streams is detected", "[conformance]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream a(device);
  ScopedStream b(device);
  void* p = pool.allocate(kBytes, a);
  device.fill(p, kBytes, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kBytes, kTagA, a);
  device.busy(b, 10ms);              // lands inside A's busy period, after A's fill
  device.fill(p, kBytes, kTagB, b);  // what a buggy allocator would let B do
  device.synchronize_device();
  CHECK(device.mismatches() > 0);
  pool.deallocate(p, a);
}

TEST_CASE("a block freed on a busy stream is not overwritten by another stream", "[conformance]") {
  // The pool holds one block's worth: B can only have p, and only once it is
  // ordered after A's use of it — by a wait (internal dependencies) or, with
  // that switched off, by the out-of-memory path's device synchronize.
  TestDevice& device = test_device();
  struct Setting {
    bool opportunistic, internal;
  };
  const Setting settings[] = {{true, true}, {true, false}, {false, true}, {false, false}};
  for (const Setting& setting : settings) {
    INFO("opportunistic " << setting.opportunistic << ", internal dependencies " << setting.internal);
    device.reset_mismatches();
    PoolOptions options = options_on(device);
    options.max_size = kBytes;
    Pool pool(options);
    set_reuse(pool, setting.opportunistic, setting.internal);
    ScopedStream a(device);
    ScopedStream b(device);

    void* p = pool.allocate(kBytes, a);
    device.fill(p, kBytes, kTagA, a);
    device.busy(a, 50ms);
    device.expect(p, kBytes, kTagA, a);
    pool.deallocate(p, a);  // a large free: a fence covers it at once

    void* q = pool.allocate(kBytes, b);
    device.fill(q, kBytes, kTagB, b);
    CHECK(q == p);
    const PoolStats stats = pool.stats();
    if (setting.internal) {
      CHECK(stats.cross_stream_waits == 1);
      CHECK(stats.device_synchronizes == 0);
    } else {
      CHECK(stats.cross_stream_waits == 0);
      CHECK(stats.device_synchronizes == 1);
    }
    device.synchronize_device();
    CHECK(device.mismatches() == 0);
    pool.check_invariants();
    pool.deallocate(q, b);
  }
}

TEST_CASE("with room to grow, another stream grows rather than wait on a busy stream", "[conformance]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream a(device);
  ScopedStream b(device);
  void* p = pool.allocate(kBytes, a);
  device.fill(p, kBytes, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kBytes, kTagA, a);
  pool.deallocate(p, a);
  void* q = pool.allocate(kBytes, b);
  device.fill(q, kBytes, kTagB, b);
  CHECK(q != p);
  CHECK(pool.stats().cross_stream_waits == 0);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.deallocate(q, b);
}

TEST_CASE("a busy stream's free, coalesced with free neighbours, stays out of another stream's reach",
          "[conformance]") {
  // Free blocks coalesce whatever stream freed them; what another stream may
  // not touch yet is kept as pending ranges (docs/design.md). B's request
  // fits the coalesced block only from A's pending free on: it must be placed
  // after it, and A's work must see its own data.
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  set_reuse(pool, true, false);  // no waits: B can only place clear of A's free
  ScopedStream a(device);
  ScopedStream b(device);
  void* p = pool.allocate(kBytes, a);
  void* n = pool.allocate(kBytes, a);
  REQUIRE(n == static_cast<char*>(p) + kBytes);
  pool.deallocate(n, a);
  device.synchronize(a);
  pool.stream_synchronized(a);  // n's free is complete
  device.fill(p, kBytes, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kBytes, kTagA, a);
  pool.deallocate(p, a);               // pending: A is busy
  void* tiny = pool.allocate(512, a);  // A's miss: its cache goes to the heap, p and n coalesce
  pool.check_invariants();

  void* q = pool.allocate(2 * kBytes, b);
  device.fill(q, 2 * kBytes, kTagB, b);
  CHECK(q == n);  // right after A's pending free, not over it
  CHECK(pool.stats().cross_stream_waits == 0);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  pool.deallocate(q, b);
  pool.deallocate(tiny, a);
}

TEST_CASE("small frees get a fence when another stream asks, at the freeing stream's next call", "[conformance]") {
  // Pool of two granules (4 MiB): p and r (A) and a filler (B) share the first,
  // B's 2 MiB q1 takes the second; then B's next 1 MiB can only be p, with a wait.
  TestDevice& device = test_device();
  device.reset_mismatches();
  PoolOptions options = options_on(device);
  options.max_size = std::size_t{4} << 20;
  Pool pool(options);
  ScopedStream a(device);
  ScopedStream b(device);
  constexpr std::size_t kSmall = std::size_t{1} << 20;  // below a granule: no fence of its own
  void* p = pool.allocate(kSmall, a);
  void* r = pool.allocate(512, a);                // A frees it later: A's "next call"
  void* filler = pool.allocate(kSmall - 512, b);  // the rest of the first granule
  device.fill(p, kSmall, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kSmall, kTagA, a);
  pool.deallocate(p, a);
  const std::uint64_t events_before = pool.stats().events_recorded;

  void* q1 = pool.allocate(2 * kSmall, b);  // nothing covers p yet: B grows, and asks A for a fence
  CHECK(q1 != p);
  CHECK(pool.stats().events_recorded == events_before);

  pool.deallocate(r, a);  // A's next call records the requested fence
  CHECK(pool.stats().events_recorded == events_before + 1);

  void* q2 = pool.allocate(kSmall, b);  // full: internal dependency, wait on A's fence
  CHECK(q2 == p);
  CHECK(pool.stats().cross_stream_waits == 1);
  CHECK(pool.stats().device_synchronizes == 0);
  device.fill(q2, kSmall, kTagB, b);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.deallocate(q1, b);
  pool.deallocate(q2, b);
  pool.deallocate(filler, b);
  pool.check_invariants();
}

TEST_CASE("frees known complete are reused by other streams (opportunistic)", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream a(device);
  ScopedStream b(device);
  void* p = pool.allocate(kBytes, a);
  pool.deallocate(p, a);  // a large free records a fence (first in this stream)
  device.synchronize(a);
  const std::uint64_t reserved = attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  void* q = pool.allocate(kBytes, b);
  CHECK(q == p);
  CHECK(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == reserved);
  CHECK(pool.stats().cross_stream_reuses == 1);
  CHECK(pool.stats().cross_stream_waits == 0);
  pool.deallocate(q, b);
  pool.check_invariants();
}

TEST_CASE("with every reuse switch off, another stream never gets a freed block before it is complete",
          "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  set_reuse(pool, false, false);
  ScopedStream a(device);
  ScopedStream b(device);
  void* p = pool.allocate(kBytes, a);
  pool.deallocate(p, a);
  device.synchronize(a);
  void* q = pool.allocate(kBytes, b);
  CHECK(q != p);
  CHECK(pool.stats().cross_stream_reuses == 0);
  pool.deallocate(q, b);
}

TEST_CASE("out of memory waits for other streams' frees before failing", "[conformance]") {
  TestDevice& device = test_device();
  PoolOptions options = options_on(device);
  options.max_size = std::size_t{16} << 20;
  Pool pool(options);
  set_reuse(pool, false, false);
  ScopedStream a(device);
  ScopedStream b(device);
  device.reset_mismatches();
  void* p = pool.allocate(std::size_t{16} << 20, a);
  device.fill(p, std::size_t{16} << 20, kTagA, a);
  device.busy(a, 30ms);
  device.expect(p, std::size_t{16} << 20, kTagA, a);
  pool.deallocate(p, a);
  // Only p's memory can satisfy B: the pool must make it safe (synchronize) first.
  void* q = pool.allocate(std::size_t{16} << 20, b);
  CHECK(q == p);
  CHECK(pool.stats().device_synchronizes == 1);
  device.fill(q, std::size_t{16} << 20, kTagB, b);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.deallocate(q, b);
  pool.check_invariants();
}

TEST_CASE("after a device synchronize, a stream's later frees are not taken as complete", "[conformance]") {
  // Regression (found by the stress program): synchronizing closed a stream's
  // open epoch even when it held no frees, so frees made afterwards counted
  // as complete at once and another stream overwrote a block still in use.
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  ScopedStream a(device);
  ScopedStream b(device);
  ScopedStream c(device);
  pool.deallocate(pool.allocate(4096, c), c);  // something cached, so trim must synchronize
  void* p = pool.allocate(kBytes, a);
  pool.trim_to(0);
  REQUIRE(pool.stats().device_synchronizes == 1);
  device.fill(p, kBytes, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kBytes, kTagA, a);
  pool.deallocate(p, a);
  void* q = pool.allocate(kBytes, b);
  device.fill(q, kBytes, kTagB, b);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.deallocate(q, b);
  pool.check_invariants();
}

TEST_CASE("frees on another stream do not inflate the used high-water mark", "[conformance]") {
  TestDevice& device = test_device();
  Pool pool(options_on(device));
  ScopedStream a(device);
  ScopedStream b(device);
  for (int i = 0; i < 100; ++i) {
    void* p = pool.allocate(std::size_t{1} << 20, a);
    pool.deallocate(p, b);
    device.synchronize(b);
  }
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemHigh) == (std::uint64_t{1} << 20));
  CHECK(attribute(pool, cudaMemPoolAttrUsedMemCurrent) == 0);
}

TEST_CASE("a stream destroyed while its work runs: its cached blocks never race a new stream", "[conformance]") {
  // A new stream may receive the destroyed one's handle (CUDA hands it out
  // again only after the old work is done) and so inherit its cache.
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  cudaStream_t a = device.create_stream();
  void* p = pool.allocate(kBytes, a);
  device.fill(p, kBytes, kTagA, a);
  device.busy(a, 50ms);
  device.expect(p, kBytes, kTagA, a);
  pool.deallocate(p, a);
  device.destroy_stream(a);  // returns at once; A's work still runs
  ScopedStream b(device);
  void* q = pool.allocate(kBytes, b);
  device.fill(q, kBytes, kTagB, b);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  pool.deallocate(q, b);
  pool.check_invariants();
}

TEST_CASE("after stream_synchronized, another stream reuses the frees without a wait or a synchronize",
          "[conformance]") {
  TestDevice& device = test_device();
  for (const bool told : {false, true}) {
    INFO("stream_synchronized called: " << told);
    Pool pool(options_on(device));
    set_reuse(pool, true, false);  // opportunistic only
    ScopedStream a(device);
    ScopedStream b(device);
    constexpr std::size_t kSmall = std::size_t{1} << 20;  // small: no fence of its own
    void* p = pool.allocate(kSmall, a);
    void* filler = pool.allocate(kSmall, b);  // fills p's granule: B cannot use backed memory beside p
    pool.deallocate(p, a);
    device.synchronize(a);
    if (told) pool.stream_synchronized(a);
    void* q = pool.allocate(kSmall, b);
    const PoolStats stats = pool.stats();
    if (told) {
      CHECK(q == p);
      CHECK(stats.cross_stream_reuses == 1);
    } else {
      CHECK(q != p);  // nothing proves A's free complete: B grows
      CHECK(stats.cross_stream_reuses == 0);
    }
    CHECK(stats.cross_stream_waits == 0);
    CHECK(stats.device_synchronizes == 0);
    pool.deallocate(q, b);
    pool.deallocate(filler, b);
    pool.check_invariants();
  }
}

TEST_CASE("a quiet stream's last frees wait for a trim, which waits for its work: no background synchronize",
          "[conformance]") {
  // The pool is not told when a stream goes quiet or is destroyed, and never
  // asks its handle again. Frees no fence covers then come back only by a
  // device synchronize, which the release worker never makes (it would
  // invalidate any capture on the device: docs/graphs.md, "Captures sova does
  // not know"); a trim or the out-of-memory path makes it. A's work outlasts
  // the worker's window by far: B must never get A's block while it runs.
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(options_on(device));
  set_reuse(pool, true, false);  // opportunistic only: no wait inserted on B
  ScopedStream a(device);
  ScopedStream b(device);
  constexpr std::size_t kSmall = std::size_t{1} << 20;  // small: no fence of its own
  void* p = pool.allocate(kSmall, a);
  void* filler = pool.allocate(kSmall, b);  // fills p's granule: B cannot use backed memory beside p
  device.fill(p, kSmall, kTagA, a);
  device.busy(a, 1500ms);
  device.expect(p, kSmall, kTagA, a);
  pool.deallocate(p, a);  // A's last call
  const auto freed = std::chrono::steady_clock::now();

  std::this_thread::sleep_until(freed + 700ms);  // A inactive, its work still running
  void* early = pool.allocate(kSmall, b);
  device.fill(early, kSmall, kTagB, b);
  CHECK(early != p);

  std::this_thread::sleep_until(freed + 2500ms);  // A's work done; the pool cannot know
  void* late = pool.allocate(kSmall, b);
  device.fill(late, kSmall, kTagB, b);
  CHECK(late != p);
  CHECK(pool.stats().device_synchronizes == 0);  // none in the background
  pool.deallocate(late, b);
  pool.trim_to(0);  // synchronizes: A's frees complete, released with what else is free
  CHECK(pool.stats().device_synchronizes == 1);
  device.synchronize_device();
  CHECK(device.mismatches() == 0);
  for (void* block : {early, filler}) pool.deallocate(block, b);
  pool.check_invariants();
}
