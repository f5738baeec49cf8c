// What wake writes: the bytes of the blocks still live, and nothing else.
// Wake returns before its copies run; the free memory between and around
// live blocks (a gap freed before the sleep, a block freed while asleep) is
// the pool's from then on, to hand to another stream or to release, so a
// restore that wrote it would overwrite another stream's data or fault on
// memory already unmapped. The simulation's copy delay makes the restore
// run after the work that follows wake, and its fault check
// (SimConfig::abort_on_fault false) says when a copy touched memory no
// longer mapped.
#include "sleep/sleep_checks.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

using namespace sova;
using namespace sova::sleep_test;

namespace {

constexpr auto kLateCopies = std::chrono::milliseconds(30);

SimConfig recording_sim() {
  SimConfig c;
  c.total_memory = std::size_t{256} << 20;
  c.abort_on_fault = false;
  return c;
}

PoolOptions on(SimDriver& sim) {
  PoolOptions o;
  o.driver = &sim;
  return o;
}

Filled allocate_filled_one(Pool& pool, cudaStream_t stream, std::size_t bytes, std::uint32_t seed) {
  Filled f{pool.allocate(bytes, stream), bytes, seed};
  fill(f);
  return f;
}

char* at(const Filled& f) { return static_cast<char*>(f.ptr); }

/// Wake on `stream` with its copies late, then `after` (the work that follows
/// wake on the host and other streams), then the copies run; no fault, and
/// the kept blocks hold their bytes.
template <class After>
void wake_then(SimDriver& sim, Pool& pool, cudaStream_t stream, const std::vector<Filled>& kept, After&& after) {
  sim.delay_copies(kLateCopies);
  REQUIRE(pool.wake(stream) == cudaSuccess);
  sim.delay_copies(std::chrono::microseconds(0));
  after();
  check_intact_once_synchronized(sim, stream, kept);
  INFO(sim.first_fault());
  CHECK(sim.faults() == 0);
}

}  // namespace

TEST_CASE("wake writes no byte of a gap freed before the sleep: another stream's block there keeps its bytes",
          "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s1 = sim.create_stream(), s2 = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s1, 64 * KiB, 1);
    const Filled gap = allocate_filled_one(pool, s2, 256 * KiB, 2);
    const Filled b = allocate_filled_one(pool, s1, 64 * KiB, 3);
    // The gap lies between a and b, closer than 1 MiB: backed up with them as one.
    REQUIRE(at(a) < at(gap));
    REQUIRE(at(gap) < at(b));
    REQUIRE(at(b) - at(a) < static_cast<std::ptrdiff_t>(MiB));
    pool.deallocate(gap.ptr, s2);
    REQUIRE(pool.sleep(SleepMode::backup, s1) == cudaSuccess);
    Filled reused;
    wake_then(sim, pool, s1, {a, b}, [&] {
      // s2's own cache gives it the gap at once; its work writes it.
      reused = Filled{pool.allocate(256 * KiB, s2), 256 * KiB, 9};
      REQUIRE(reused.ptr == gap.ptr);
      fill(reused);
    });
    CHECK(intact(reused));
    free_blocks_and_stream(pool, sim, s1, {a, b});
    free_blocks_and_stream(pool, sim, s2, {reused});
  }
  check_nothing_left_with_driver(sim);
}

TEST_CASE("wake writes no byte of a block freed while asleep: another stream's block there keeps its bytes",
          "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s1 = sim.create_stream(), s2 = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s1, 3 * MiB + 4100, 1);
    const Filled freed = allocate_filled_one(pool, s2, 777, 2);
    const Filled b = allocate_filled_one(pool, s1, 4 * KiB, 3);
    REQUIRE(pool.sleep(SleepMode::backup, s1) == cudaSuccess);
    pool.deallocate(freed.ptr, s2);  // final: free when the pool wakes
    Filled reused;
    wake_then(sim, pool, s1, {a, b}, [&] {
      reused = Filled{pool.allocate(777, s2), 777, 9};
      REQUIRE(reused.ptr == freed.ptr);
      fill(reused);
    });
    CHECK(intact(reused));
    free_blocks_and_stream(pool, sim, s1, {a, b});
    free_blocks_and_stream(pool, sim, s2, {reused});
  }
  check_nothing_left_with_driver(sim);
}

TEST_CASE("memory trimmed right after wake is not written by the restore (a block freed while asleep)", "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s, 2 * MiB, 1);
    const Filled freed = allocate_filled_one(pool, s, 8 * MiB, 2);
    const Filled b = allocate_filled_one(pool, s, 2 * MiB, 3);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    pool.deallocate(freed.ptr, s);
    pool.trim_to(0);  // asleep: the free completes, nothing to release yet
    wake_then(sim, pool, s, {a, b}, [&] {
      const std::uint64_t reserved = pool.stats().reserved_current;
      pool.trim_to(0);  // the freed block's chunks go before the restore runs
      REQUIRE(pool.stats().reserved_current < reserved);
    });
    free_blocks_and_stream(pool, sim, s, {a, b});
  }
  check_nothing_left_with_driver(sim);
}

TEST_CASE("a sleep cut short by a failed unmap, then a release, then wake: no fault, live bytes back", "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s, 2 * MiB, 1);
    const Filled freed = allocate_filled_one(pool, s, 8 * MiB, 2);
    const Filled b = allocate_filled_one(pool, s, 2 * MiB, 3);
    const std::uint64_t reserved = pool.stats().reserved_current;
    sim.fail_unmap_at(1);
    CHECK(pool.sleep(SleepMode::backup, s) != cudaSuccess);
    REQUIRE(pool.asleep());  // documented: asleep, the chunks not released still mapped
    REQUIRE(sim.counters().physical_bytes == reserved);
    pool.deallocate(freed.ptr, s);
    pool.trim_to(0);  // releases the freed block's chunks, mapped still
    REQUIRE(sim.counters().physical_bytes < reserved);
    REQUIRE(pool.wake(s) == cudaSuccess);  // makes only what the sleep released: nothing
    check_intact_once_synchronized(sim, s, {a, b});
    INFO(sim.first_fault());
    CHECK(sim.faults() == 0);
    pool.check_invariants();
    free_blocks_and_stream(pool, sim, s, {a, b});
  }
  check_nothing_left_with_driver(sim);
}

TEST_CASE("adjacent live blocks are restored by one copy; a block freed while asleep splits it", "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s = sim.create_stream();
    std::vector<Filled> blocks;
    for (std::uint32_t i = 0; i < 6; ++i) blocks.push_back(allocate_filled_one(pool, s, 1000 + i * 512, i + 1));
    for (std::size_t i = 1; i < blocks.size(); ++i) REQUIRE(at(blocks[i - 1]) < at(blocks[i]));
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    pool.deallocate(blocks[3].ptr, s);
    const std::size_t copies_before = sim.counters().copies;
    REQUIRE(pool.wake(s) == cudaSuccess);
    CHECK(sim.counters().copies - copies_before == 2);  // blocks 0-2, then 4-5
    blocks.erase(blocks.begin() + 3);
    check_intact_once_synchronized(sim, s, blocks);
    CHECK(sim.faults() == 0);
    free_blocks_and_stream(pool, sim, s, blocks);
  }
  check_nothing_left_with_driver(sim);
}

// The grown fuzz interpreter under AddressSanitizer (seed 1821, length 3072,
// program 77): a copy of wake's restore wrote memory a trim had released. A
// block live at wake (so restored), freed right after wake on another stream
// than wake's, then a trim, while the restore still ran. Memory the pool
// releases or hands out is never written by sova afterwards: a free made
// while a restore may run is ordered after it (PoolSleep::order_after_restore).
TEST_CASE("a block restored by wake, freed at once on another stream, then trimmed: the restore writes no released memory",
          "[sleep]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s = sim.create_stream();
    cudaStream_t other = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s, 2 * MiB, 1);
    const Filled restored = allocate_filled_one(pool, s, 8 * MiB, 2);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    sim.delay_copies(kLateCopies);
    REQUIRE(pool.wake(s) == cudaSuccess);
    sim.delay_copies(std::chrono::microseconds(0));
    pool.deallocate(restored.ptr, other);  // not ordered after wake's stream
    REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
    pool.stream_synchronized(other);
    pool.trim_to(0);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    INFO(sim.first_fault());
    CHECK(sim.faults() == 0);
    free_blocks_and_stream(pool, sim, s, {a});
    sim.destroy_stream(other);
  }
}

// The same fuzz program's actual order: a graph's block, live at wake (so
// restored), given back when the graph was destroyed right after wake, as
// complete for every stream; a trim then released it under the restore.
TEST_CASE("a graph destroyed right after wake gives its blocks back only once the restore is done", "[sleep][graphs]") {
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));
    cudaStream_t s = sim.create_stream();
    cudaStream_t capturing = sim.create_stream();
    const Filled a = allocate_filled_one(pool, s, 2 * MiB, 1);
    REQUIRE(sim.begin_capture(capturing, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* held = pool.allocate(8 * MiB, capturing);  // the graph's: live until its release
    pool.deallocate(held, capturing);                 // a free node: the graph keeps the block
    cudaGraph_t graph = nullptr;
    REQUIRE(sim.end_capture(capturing, &graph) == cudaSuccess);
    REQUIRE(pool.sleep(SleepMode::backup, s) == cudaSuccess);
    sim.delay_copies(kLateCopies);
    REQUIRE(pool.wake(s) == cudaSuccess);
    sim.delay_copies(std::chrono::microseconds(0));
    REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
    (void)pool.stats();  // collects the release
    pool.trim_to(0);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    INFO(sim.first_fault());
    CHECK(sim.faults() == 0);
    free_blocks_and_stream(pool, sim, s, {a});
    sim.destroy_stream(capturing);
  }
}

// A free made on another thread while wake runs (after wake chose the live
// blocks, before it returned) is ordered after the restore like a free made
// after wake: the freeing stream's next allocation gets the block back, and
// what that stream writes there is not overwritten by the restore (backup)
// or the zeroing (discard_zeroed) that runs late. The free happens inside
// wake, at its first map (SimDriver::before_next_map); the hook gives the
// free up to 200 ms, which is all it needs when the free is not ordered.
TEST_CASE("a block freed on another thread while wake runs is not overwritten by the restore after reuse",
          "[sleep][wake_race]") {
  const SleepMode mode = GENERATE(SleepMode::backup, SleepMode::discard_zeroed);
  INFO((mode == SleepMode::backup ? "backup" : "discard_zeroed"));
  SimDriver sim(recording_sim());
  {
    Pool pool(on(sim));  // release threshold 0: the release worker may take what is freed
    cudaStream_t s = sim.create_stream();
    cudaStream_t other = sim.create_stream();
    const Filled kept = allocate_filled_one(pool, s, 2 * MiB, 1);
    const Filled victim = allocate_filled_one(pool, s, 64 * KiB, 2);
    REQUIRE(pool.sleep(mode, s) == cudaSuccess);
    std::atomic<bool> freed{false};
    std::thread freer;
    sim.before_next_map([&] {
      freer = std::thread([&] {
        pool.deallocate(victim.ptr, other);
        freed.store(true);
      });
      for (int i = 0; i < 200 && !freed.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    sim.delay_copies(kLateCopies);
    REQUIRE(pool.wake(s) == cudaSuccess);
    sim.delay_copies(std::chrono::microseconds(0));
    freer.join();
    void* again = pool.allocate(64 * KiB, other);
    REQUIRE(again == victim.ptr);  // the freeing stream's own block, from its cache
    sim.launch(other, [again] { std::memset(again, 0x5a, 64 * KiB); });
    REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    REQUIRE(sim.device_synchronize(0) == cudaSuccess);  // the pool's copy stream too
    const auto* bytes = static_cast<const unsigned char*>(again);
    std::size_t overwritten = 0;
    for (std::size_t i = 0; i < 64 * KiB; ++i) overwritten += bytes[i] != 0x5a ? 1 : 0;
    CHECK(overwritten == 0);
    INFO(sim.first_fault());
    CHECK(sim.faults() == 0);
    pool.deallocate(again, other);
    if (mode == SleepMode::backup) CHECK(intact(kept));
    free_blocks_and_stream(pool, sim, s, {kept});
    sim.destroy_stream(other);
  }
}
