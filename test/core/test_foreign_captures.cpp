// Captures sova does not know (docs/graphs.md, "Captures sova does not
// know"): a global-mode capture of plain work on a stream the pool never saw,
// beside the pool's eager work on other streams. On the simulation, as on the
// GPU, a device synchronize while it runs invalidates it. The release worker
// never synchronizes a device; a trim or an out-of-memory retry whose pending
// frees all have fences waits for those fences alone.
#include "core/sim_pool_fixture.hpp"

#include <chrono>
#include <memory>
#include <cstdint>
#include <thread>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// A global-mode capture of plain work on its own stream, ended by end().
class ForeignCapture {
 public:
  explicit ForeignCapture(SimDriver& sim) : sim_(sim), stream_(sim.create_stream()) {
    REQUIRE(sim_.begin_capture(stream_, cudaStreamCaptureModeGlobal) == cudaSuccess);
    sim_.launch(stream_, [] {});
  }
  ~ForeignCapture() { sim_.destroy_stream(stream_); }
  ForeignCapture(const ForeignCapture&) = delete;
  ForeignCapture& operator=(const ForeignCapture&) = delete;
  /// The capture's result: cudaSuccess unless something invalidated it.
  cudaError_t end() {
    sim_.launch(stream_, [] {});
    cudaGraph_t graph = nullptr;
    const cudaError_t result = sim_.end_capture(stream_, &graph);
    if (graph != nullptr) sim_.graph_destroy(graph);
    return result;
  }

 private:
  SimDriver& sim_;
  cudaStream_t stream_;
};

}  // namespace

TEST_CASE("foreign capture: survives the release worker beside a quiet stream's unfenced frees",
          "[core][graphs][foreign_capture]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));  // release threshold 0: the worker releases what it can
  const cudaStream_t quiet = sim.create_stream();
  void* blocks[3] = {};
  for (void*& p : blocks) p = pool.allocate(kMiB, quiet);  // small: no fence of their own
  for (void* p : blocks) pool.deallocate(p, quiet);
  ForeignCapture capture(sim);
  // The stream turns inactive after ~200 ms; the worker looks every 20 ms.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  CHECK(capture.end() == cudaSuccess);
  sim.destroy_stream(quiet);
}

TEST_CASE("foreign capture: survives a trim whose pending frees have fences", "[core][graphs][foreign_capture]") {
  SimDriver sim(small_sim());
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};  // only the trim releases
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();
  void* big = pool.allocate(8 * kMiB, s);
  sim.launch(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });  // work still reading it
  pool.deallocate(big, s);  // a free of a granule or more: the first records a fence
  ForeignCapture capture(sim);
  const std::uint64_t synchronizes = sim.counters().device_synchronizes;
  pool.trim_to(0);
  CHECK(sim.counters().device_synchronizes == synchronizes);  // the fence was waited for instead
  CHECK(pool.stats().reserved_current == 0);                   // and the memory released
  CHECK(capture.end() == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("foreign capture: survives an out-of-memory retry whose pending frees have fences",
          "[core][graphs][foreign_capture]") {
  SimDriver sim(small_sim());  // a device of small_sim()'s size
  PoolOptions options = options_on(sim);
  options.max_size = 32 * kMiB;
  Pool pool(options);
  const cudaStream_t a = sim.create_stream();
  const cudaStream_t b = sim.create_stream();
  void* big = pool.allocate(24 * kMiB, a);
  sim.launch(a, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  pool.deallocate(big, a);  // fenced (a large free)
  ForeignCapture capture(sim);
  // B needs A's memory: the pool is at its limit, A's free is pending.
  void* again = nullptr;
  REQUIRE(pool.try_allocate(&again, 24 * kMiB, b) == cudaSuccess);
  CHECK(capture.end() == cudaSuccess);
  pool.deallocate(again, b);
  REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
  sim.destroy_stream(b);
  sim.destroy_stream(a);
}

TEST_CASE("foreign capture: destroying a pool whose pending frees have fences leaves it valid",
          "[core][graphs][foreign_capture]") {
  SimDriver sim(small_sim());
  const cudaStream_t s = sim.create_stream();
  auto pool = std::make_unique<Pool>(options_on(sim));
  void* big = pool->allocate(8 * kMiB, s);
  sim.launch(s, [] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  pool->deallocate(big, s);  // fenced (a large free)
  ForeignCapture capture(sim);
  pool.reset();
  CHECK(capture.end() == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("foreign capture: idle release still gives a quiet stream's large frees back, by their fences",
          "[core][graphs][foreign_capture][release]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));  // release threshold 0: every free of a granule or more records a fence
  const cudaStream_t s = sim.create_stream();
  for (int round = 0; round < 3; ++round) {  // later large frees too, not only the first
    void* a = pool.allocate(8 * kMiB, s);
    void* b = pool.allocate(16 * kMiB, s);
    pool.deallocate(a, s);
    pool.deallocate(b, s);
  }
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);  // the program knows; the pool is not told
  ForeignCapture capture(sim);
  const std::uint64_t synchronizes = sim.counters().device_synchronizes;
  std::uint64_t reserved = 1;
  for (int i = 0; i < 200 && reserved != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(pool.get_attribute(cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess);
  }
  CHECK(reserved == 0);
  CHECK(sim.counters().device_synchronizes == synchronizes);
  CHECK(capture.end() == cudaSuccess);
  sim.destroy_stream(s);
}

TEST_CASE("foreign capture: frees a refused synchronize closed stay pending until a later wait covers them",
          "[core][graphs][foreign_capture]") {
  // The fuzz interpreter's seeds 1002, 1005 and 1007 (length 3072) under
  // AddressSanitizer: a trim's device synchronize, refused while a capture ran,
  // had closed the stream's epoch; a later trim found no free in an open epoch
  // and no fence, waited for nothing, and released memory a kernel still read.
  SimConfig config = small_sim();
  config.abort_on_fault = false;
  SimDriver sim(config);
  PoolOptions options = options_on(sim);
  options.release_threshold = ~std::uint64_t{0};  // only the trims release
  Pool pool(options);
  const cudaStream_t s = sim.create_stream();
  void* p = pool.allocate(kMiB, s);  // small: its free records no fence
  sim.delay(s, std::chrono::milliseconds(100));
  sim.launch_touching(s, p, kMiB, /*write=*/false, [] {});  // still reading it when the trims come
  pool.deallocate(p, s);
  {
    ForeignCapture capture(sim);
    pool.trim_to(0);  // its device synchronize is refused (and invalidates the capture)
    CHECK(capture.end() == cudaErrorStreamCaptureInvalidated);
  }
  pool.trim_to(0);  // must wait for the kernel before it releases p's memory
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(sim.faults() == 0);
  INFO(sim.first_fault());
  CHECK(pool.stats().reserved_current == 0);
  sim.destroy_stream(s);
}
