// Defects the fuzz interpreter's capture operations found (docs/fuzzing.md,
// "Known defects"), each the smallest program that shows it. Tagged
// [!mayfail]: they fail until sova is fixed; then drop the tag. One crashes
// the process (a segmentation fault: the simulation sees no fault once the
// pool's VA is freed too) and is hidden as well ([.]): run it by name.
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
          "[graphs][fuzz-finding][!mayfail]") {
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
// documented limitation), and it then unmaps memory that queued work still
// uses: a device fault (a segmentation fault with plain kernels). Found by
// the fuzz corpus's seed-03 once captures were added. Hidden: it crashes.
TEST_CASE("a pool destroyed while another stream captures waits for the work queued on its memory",
          "[.][graphs][fuzz-finding][!mayfail]") {
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
