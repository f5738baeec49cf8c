// PoolStats' slow-path counters: every allocation the fast path
// did not serve is counted under the step of the ladder that served it, with
// a sampled time; the counts add up to allocations - fast_path_hits.
#include "core/sim_pool_fixture.hpp"

#include <vector>

using namespace sova;
using namespace sova::test;

namespace {
std::uint64_t slow_total(const PoolStats& s) {
  return s.slow_from_heap + s.slow_from_heap_all + s.slow_from_other_streams + s.slow_with_wait + s.slow_grown +
         s.slow_after_synchronize;
}
}  // namespace

TEST_CASE("slow-path counters: growth, then the heap, then the fast path", "[core][stats]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  cudaStream_t stream = sim.create_stream();

  // A first allocation grows the pool.
  void* a = pool.allocate(std::size_t{3} << 20, stream);
  PoolStats s = pool.stats();
  CHECK(s.slow_grown == 1);
  CHECK(slow_total(s) == 1);

  // Freed, then a smaller size (above the default policy's small blocks,
  // which have a region of their own): no block of that size is cached, so
  // the slow path places it in the memory the free gave back, without growing.
  pool.deallocate(a, stream);
  void* b = pool.allocate(std::size_t{2} << 20, stream);
  s = pool.stats();
  CHECK(s.slow_from_heap == 1);
  CHECK(s.slow_grown == 1);

  // The same size again after its free: the stream's cache serves it.
  pool.deallocate(b, stream);
  void* c = pool.allocate(std::size_t{2} << 20, stream);
  s = pool.stats();
  CHECK(s.fast_path_hits == 1);
  CHECK(slow_total(s) == s.allocations - s.fast_path_hits);
  pool.deallocate(c, stream);
  sim.stream_synchronize(stream);
  sim.destroy_stream(stream);
}

TEST_CASE("slow-path counters: another stream's completed frees, and the counts add up", "[core][stats]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  cudaStream_t first = sim.create_stream();
  cudaStream_t second = sim.create_stream();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(pool.allocate(std::size_t{2} << 20, first));
  for (void* p : blocks) pool.deallocate(p, first);
  sim.stream_synchronize(first);
  pool.stream_synchronized(first);  // its frees are complete: any stream may take them
  const PoolStats before = pool.stats();
  void* p = pool.allocate(std::size_t{4} << 20, second);
  const PoolStats after = pool.stats();
  CHECK(after.slow_from_other_streams == before.slow_from_other_streams + 1);
  CHECK(after.slow_grown == before.slow_grown);
  CHECK(after.reserved_current == before.reserved_current);
  CHECK(slow_total(after) == after.allocations - after.fast_path_hits);
  pool.deallocate(p, second);
  sim.stream_synchronize(second);
  sim.destroy_stream(first);
  sim.destroy_stream(second);
}

TEST_CASE("slow-path counters: time is sampled per step", "[core][stats]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};
  Pool pool(options);
  cudaStream_t stream = sim.create_stream();
  // New sizes each time: every allocation takes the slow path.
  std::vector<void*> blocks;
  for (int i = 1; i <= 64; ++i) blocks.push_back(pool.allocate(static_cast<std::size_t>(i) * 4096, stream));
  const PoolStats s = pool.stats();
  CHECK(slow_total(s) == 64);
  CHECK(s.slow_grown + s.slow_from_heap == 64);
  // One in kSlowTimingEvery (8) per thread is timed: 64 calls give 8 samples.
  CHECK(s.slow_grown_ns + s.slow_from_heap_ns > 0);
  CHECK(s.slow_with_wait_ns == 0);
  CHECK(s.slow_after_synchronize_ns == 0);
  for (void* p : blocks) pool.deallocate(p, stream);
  sim.stream_synchronize(stream);
  sim.destroy_stream(stream);
}
