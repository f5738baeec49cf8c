// Defects the fuzz interpreter's capture operations found (docs/fuzzing.md,
// "Known defects"), each the smallest program that shows it. One still open is
// tagged [!mayfail] (it fails until sova is fixed; then drop the tag); the
// fixed ones guard their fix.
#include "core/sim_pool_fixture.hpp"

#include <chrono>
#include <cstring>

using namespace sova;
using namespace sova::test;

// docs/graphs.md, "When memory comes back": a block the graph allocated and
// nobody freed stays the caller's, "an ordinary block of the pool"; used
// bytes are the requested sizes (sova/pool.hpp). A block that reused, in the
// same capture, a bigger block freed earlier in it counts the bigger one's
// requested size once the graph is released (fuzz: random #0, seed 17,
// length 1536).
TEST_CASE("a graph output that reused a block freed in its capture counts its own size after the release",
          "[graphs][fuzz-finding]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* big = pool.allocate(48129, s);
  pool.deallocate(big, s);              // a free node: reusable by this capture on s
  void* small = pool.allocate(128, s);  // reuses it (smallest fit)
  CHECK(small == big);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  const PoolStats after = pool.stats();  // the release is collected
  CHECK(pool.graph_memory_stats().graphs == 0);
  CHECK(pool.block_size(small) == 128);
  CHECK(after.used_current == 128);  // was 48129
  pool.deallocate(small, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(pool.stats().used_current == 0);
  sim.destroy_stream(s);
}

// ~Pool "waits for the device's outstanding work, then releases all memory".
// While another stream captures, its device synchronize is refused
// (cudaErrorStreamCaptureUnsupported, and the capture invalidated: the
// documented limitation); it then unmapped memory that queued work still
// used: a device fault (a segmentation fault with plain kernels; the fuzz
// corpus's seed-03 once captures were added). Now the memory is left mapped
// to the process's end (Arena::abandon).
TEST_CASE("a pool destroyed while another stream captures never unmaps memory queued work still uses",
          "[graphs][fuzz-finding]") {
  SimConfig config = small_sim();
  config.abort_on_fault = false;
  SimDriver sim(config);
  cudaStream_t work = sim.create_stream();
  cudaStream_t capturing = sim.create_stream();
  {
    Pool pool(options_on(sim));
    void* p = pool.allocate(4096, work);
    sim.delay(work, std::chrono::milliseconds(50));  // the kernel before is still running
    sim.launch_touching(work, p, 4096, true, [p] { std::memset(p, 1, 4096); });
    pool.deallocate(p, work);
    REQUIRE(sim.begin_capture(capturing, cudaStreamCaptureModeGlobal) == cudaSuccess);
  }  // ~Pool
  REQUIRE(sim.stream_synchronize(work) == cudaSuccess);
  CHECK(sim.faults() == 0);
  INFO(sim.first_fault());
  cudaGraph_t graph = nullptr;
  (void)sim.end_capture(capturing, &graph);
  if (graph != nullptr) sim.graph_destroy(graph);
  sim.destroy_stream(work);
  sim.destroy_stream(capturing);
}
