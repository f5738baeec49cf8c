// The PyTorch adapter under stream capture, on the simulation: what PyTorch's
// caching allocator and CUDAGraph do around a capture (graph_hooks.hpp).
#include "support/catch.hpp"

#include "graph_hooks.hpp"
#include "sova_torch.h"
#include "torch_adapter/adapter_sim.hpp"

#include <sova/sim.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <utility>

using sova::torch_adapter_test::sim;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

sovaTorchStats stats() {
  sovaTorchStats s;
  std::memset(&s, 0, sizeof s);
  s.pool.structSize = sizeof s.pool;
  REQUIRE(sova_torch_get_stats(0, &s) == cudaSuccess);
  return s;
}

/// Ends the capture on `stream` and destroys its graph; the capture's status.
cudaError_t end_capture(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  const cudaError_t err = sim().end_capture(stream, &graph);
  if (graph != nullptr) (void)sim().graph_destroy(graph);
  return err;
}

/// Ends the capture on `stream`, keeping its graph.
cudaGraph_t end_capture_keeping_the_graph(cudaStream_t stream) {
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(stream, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  return graph;
}

}  // namespace

TEST_CASE("torch adapter: a segment asked for during a global capture is ordinary memory and the capture stays valid",
          "[torch_adapter][capture]") {
  cudaStream_t s = sim().create_stream();
  void* warm = sova_torch_malloc_nothrow(MiB, 0, s);  // the pool exists before the capture, as under PyTorch
  REQUIRE(warm != nullptr);
  sova_torch_free(warm, MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  const std::uint64_t used_before = stats().pool.usedCurrent;

  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* segment = sova_torch_malloc_segment(4 * MiB, 0, s);
  INFO(sova_torch_last_error());
  REQUIRE(segment != nullptr);
  bool capturing = false;
  REQUIRE(sim().stream_is_capturing(s, &capturing) == cudaSuccess);
  CHECK(capturing);  // nothing the segment source did ended or broke the capture
  cudaGraph_t graph = end_capture_keeping_the_graph(s);

  // Not graph memory: the caller's until freed, and back in the pool at its
  // free while the graph still lives (graph memory would stay with the graph).
  CHECK(stats().pool.usedCurrent == used_before + 4 * MiB);
  std::memset(segment, 0x5a, 4 * MiB);  // mapped host memory on the simulation: usable now
  sova_torch_free_segment(segment, 4 * MiB, 0, s);
  CHECK(stats().pool.usedCurrent == used_before);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  sim().destroy_stream(s);
}

TEST_CASE("torch adapter: a free the pool refuses under capture is done by the end-of-capture hook",
          "[torch_adapter][capture]") {
  cudaStream_t s = sim().create_stream();
  void* eager = sova_torch_malloc_nothrow(2 * MiB, 0, s);  // allocated before the capture
  REQUIRE(eager != nullptr);
  const std::uint64_t live_before = stats().pool.liveBlocks;

  using PytorchBegin = void(int, std::pair<unsigned long long, unsigned long long>, std::function<bool(cudaStream_t)>);
  using PytorchEnd = void(int, std::pair<unsigned long long, unsigned long long>);
  // As CUDAPluggableAllocator's setters store them: std::functions over the raw addresses.
  std::function<PytorchBegin> begin = reinterpret_cast<PytorchBegin*>(&sova_torch_begin_allocate_to_pool);
  std::function<PytorchEnd> end = reinterpret_cast<PytorchEnd*>(&sova_torch_end_allocate_to_pool);
  std::function<PytorchEnd> release = reinterpret_cast<PytorchEnd*>(&sova_torch_release_pool);
  begin(0, {7, 0}, [](cudaStream_t) { return true; });

  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  sova_torch_free(eager, 2 * MiB, 0, s);  // a Python temporary dying inside the capture
  const std::uint64_t deferred = stats().deferredFrees;
  REQUIRE(end_capture(s) == cudaSuccess);  // the free broke nothing
  end(0, {7, 0});
  release(0, {7, 0});

  // Deferred (the pool refused a capturing stream) or done at once: either way
  // the block is free once the capture has ended and the hook ran.
  CHECK(stats().pool.liveBlocks == live_before - 1);
  CHECK(stats().freeErrors == 0);
  INFO("frees deferred during the capture: " << deferred);
  sim().destroy_stream(s);
}

TEST_CASE("torch adapter: what torch.cuda.graph does, and every byte is back once the graph and its tensors are gone",
          "[torch_adapter][capture]") {
  cudaStream_t s = sim().create_stream();
  void* warm = sova_torch_malloc_nothrow(MiB, 0, s);
  REQUIRE(warm != nullptr);
  sova_torch_free(warm, MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  const std::uint64_t used_before = stats().pool.usedCurrent;

  // CUDAGraph::capture_begin: the generator's seed and offset, eager, on the
  // capture stream, then begin_allocate_to_pool and the capture.
  void* seed = sova_torch_malloc_nothrow(8, 0, s);
  void* offset = sova_torch_malloc_nothrow(8, 0, s);
  REQUIRE((seed != nullptr && offset != nullptr));
  sova_torch_begin_allocate_to_pool(0, {1, 0}, [](cudaStream_t) { return true; });
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* hidden = sova_torch_malloc_nothrow(32 * 1024, 0, s);
  void* out = sova_torch_malloc_nothrow(8 * 1024, 0, s);
  REQUIRE((hidden != nullptr && out != nullptr));
  sova_torch_free(hidden, 32 * 1024, 0, s);
  cudaGraph_t graph = end_capture_keeping_the_graph(s);
  sova_torch_end_allocate_to_pool(0, {1, 0});
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim().graph_instantiate(&exec, graph) == cudaSuccess);
  const bool launch_in_flight = GENERATE(false, true);
  if (launch_in_flight) sim().delay(s, std::chrono::milliseconds(50));
  REQUIRE(sim().graph_launch(exec, s) == cudaSuccess);
  if (!launch_in_flight) REQUIRE(sim().stream_synchronize(s) == cudaSuccess);

  // del g, out: CUDAGraph's destructor (release_pool, the executable and the
  // graph destroyed, the generator's tensors freed), then the output's free.
  // With the launch in flight, CUDA tells the pool the graph is gone only
  // once the launch is done, after these frees, as on a GPU where the
  // release comes from a driver thread.
  sova_torch_release_pool(0, {1, 0});
  REQUIRE(sim().graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  sova_torch_free(seed, 8, 0, s);
  sova_torch_free(offset, 8, 0, s);
  sova_torch_free(out, 8 * 1024, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  void* probe = sova_torch_malloc_nothrow(256, 0, s);  // the pool takes released graphs back at a call
  sova_torch_free(probe, 256, 0, s);
  CHECK(stats().pool.usedCurrent == used_before);
  std::uint64_t graph_bytes = 1;
  REQUIRE(sovaMemPoolGetGraphMemAttribute(sova_torch_pool(0), cudaGraphMemAttrUsedMemCurrent, &graph_bytes) ==
          cudaSuccess);
  CHECK(graph_bytes == 0);
}
