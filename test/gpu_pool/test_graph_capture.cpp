// GPU only: sova refuses allocations and frees on a stream under graph
// capture, changes nothing, and leaves the capture valid.
#include "support/catch.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime.h>

using namespace sova;

TEST_CASE("allocation and free under graph capture are refused; the capture stays valid", "[gpu][capture]") {
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
    void* p = reinterpret_cast<void*>(0x1);
    CHECK(pool.try_allocate(&p, std::size_t{1} << 20, s) == cudaErrorStreamCaptureUnsupported);
    CHECK(p == nullptr);
    CHECK(pool.try_deallocate(eager, s) == cudaErrorStreamCaptureUnsupported);
    CHECK_THROWS_AS(pool.allocate(64, s), sova::Error);
    // The capture is still valid: record work and run the graph.
    REQUIRE(cudaMemsetAsync(eager, 0x7F, 4096, s) == cudaSuccess);
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    unsigned char first = 0;
    REQUIRE(cudaMemcpy(&first, eager, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(first == 0x7F);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  }
  const PoolStats after = pool.stats();
  CHECK(after.used_current == before.used_current);
  CHECK(after.live_blocks == 1);
  CHECK(after.reserved_current == before.reserved_current);
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
