// What NCCL's window registration needs of sova memory, on the simulation
// (suite sim, CI): NCCL maps for its peers only the one physical allocation
// under a window's start (docs/multi-gpu.md, "NCCL windows"), so a window
// must lie in one chunk. The all-reduce benchmark's sequence of sizes
// (bench/multigpu/nccl_allreduce.cpp) on an ordinary pool puts its 16 MiB
// block over more than one chunk; on a window pool (max_chunk 0, remap off,
// trimmed between sizes: the benchmark's window_pool_options) every block is
// one chunk of its own, from the chunk's first byte.
#include "core/sim_pool_fixture.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

std::vector<Pool::ChunkView> chunks_of(const Pool& pool, const void* p, std::size_t bytes) {
  std::vector<Pool::ChunkView> chunks;
  REQUIRE(pool.chunks_under(p, bytes, &chunks) == cudaSuccess);
  return chunks;
}

}  // namespace

TEST_CASE("multigpu on the simulation: an ordinary pool's block can lie over several chunks, a window pool's cannot",
          "[core][devices][nccl_window]") {
  SimDriver sim(small_sim(std::size_t{4} << 30));
  cudaStream_t s = sim.create_stream(false, 0);
  const std::size_t sizes[] = {1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB};

  SECTION("an ordinary pool, the sizes one after the other") {
    Pool pool(options_on(sim));
    std::size_t most_chunks = 0;
    for (std::size_t bytes : sizes) {
      void* p = pool.allocate(bytes, s);
      most_chunks = std::max(most_chunks, chunks_of(pool, p, bytes).size());
      pool.deallocate(p, s);
      REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
      pool.stream_synchronized(s);
    }
    CHECK(most_chunks > 1);  // what NCCL's window registration would have mapped only in part
  }
  SECTION("a window pool") {
    PoolOptions options = options_on(sim);
    options.max_chunk = 0;
    options.remap = false;
    Pool pool(options);
    for (std::size_t bytes : sizes) {
      INFO(bytes / MiB << " MiB");
      void* p = pool.allocate(bytes, s);
      const std::vector<Pool::ChunkView> chunks = chunks_of(pool, p, bytes);
      REQUIRE(chunks.size() == 1);
      CHECK(pool.va_base() + chunks[0].offset == reinterpret_cast<std::uintptr_t>(p));  // from the chunk's first byte
      CHECK(chunks[0].bytes >= bytes);
      CHECK(chunks[0].bytes < bytes + pool.granularity());
      pool.deallocate(p, s);
      REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
      pool.stream_synchronized(s);
      pool.trim_to(0);
      CHECK(pool.stats().reserved_current == 0);
    }
  }
  sim.destroy_stream(s);
}
