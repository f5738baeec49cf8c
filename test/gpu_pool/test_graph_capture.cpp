// GPU only: a pool under real graph capture, beyond the conformance suite
// (test/conformance/test_graph_capture.cpp, which runs here too): a block
// allocated before the capture cannot be freed in it, the pool's figures
// come back exactly once the graph is gone, and a pool without stream checks
// keeps the plain fast path (it cannot see capture: docs/graphs.md).
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <thread>

using namespace sova;
using namespace std::chrono_literals;

TEST_CASE("graph capture on the GPU: served in every mode; eager blocks cannot be freed in it", "[gpu][capture]") {
  PoolOptions options;
  options.driver = &cuda_driver();
  Pool pool(options);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* eager = pool.allocate(4096, s);
  const PoolStats before = pool.stats();

  const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                         cudaStreamCaptureModeRelaxed};
  for (cudaStreamCaptureMode mode : modes) {
    INFO("capture mode " << static_cast<int>(mode));
    REQUIRE(cudaStreamBeginCapture(s, mode) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(pool.try_allocate(&p, std::size_t{8} << 20, s) == cudaSuccess);
    CHECK(p != nullptr);
    CHECK(pool.try_deallocate(eager, s) == cudaErrorStreamCaptureUnsupported);
    REQUIRE(cudaMemsetAsync(p, 0x7F, std::size_t{8} << 20, s) == cudaSuccess);
    REQUIRE(cudaMemcpyAsync(eager, p, 4096, cudaMemcpyDeviceToDevice, s) == cudaSuccess);
    REQUIRE(pool.try_deallocate(p, s) == cudaSuccess);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    unsigned char first = 0;
    REQUIRE(cudaMemcpy(&first, eager, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(first == 0x7F);
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  // The graphs' memory comes back once CUDA's release callbacks ran.
  for (int i = 0; i < 10000 && pool.graph_memory_stats().graphs != 0; ++i) std::this_thread::sleep_for(1ms);
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.graph_memory_stats().released_graphs == 3);
  const PoolStats after = pool.stats();
  CHECK(after.used_current == before.used_current);
  CHECK(after.live_blocks == 1);
  pool.deallocate(eager, s);  // fine once the capture ended
  pool.check_invariants();
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("a pool without stream checks keeps the plain fast path", "[gpu][capture]") {
  PoolOptions options;
  options.driver = &cuda_driver();
  options.check_streams = false;
  Pool pool(options);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  void* p = pool.allocate(4096, s);
  pool.deallocate(p, s);
  CHECK(pool.allocate(4096, s) == p);  // the fast path, unchanged
  pool.deallocate(p, s);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}
