// A CUDA graph captured before a sleep replays after wake as before: its
// graph memory (blocks the graph holds) sleeps and wakes like live blocks,
// and the blocks it reads are restored at their addresses.
#include "sleep/sleep_test_util.hpp"

#include <cstring>

using namespace sova;
using namespace sova::sleep_test;

TEST_CASE("a graph captured before sleep replays after wake", "[sleep][graphs]") {
  SimConfig config;
  config.total_memory = std::size_t{256} << 20;
  SimDriver sim(config);
  PoolOptions options;
  options.driver = &sim;
  Pool pool(options);
  cudaStream_t stream = sim.create_stream();
  Filled input{pool.allocate(3 * MiB, stream), 3 * MiB, 9};
  fill(input);
  auto* result = static_cast<std::uint64_t*>(pool.allocate(sizeof(std::uint64_t), stream));
  std::uint64_t expected = 0;
  for (std::size_t i = 0; i < input.bytes; ++i) expected += static_cast<const std::uint8_t*>(input.ptr)[i];

  // The graph: a scratch block of graph memory, the input copied into it,
  // its bytes summed into the result.
  REQUIRE(sim.begin_capture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* scratch = pool.allocate(3 * MiB, stream);
  sim.launch(stream, [src = input.ptr, scratch, result] {
    std::memcpy(scratch, src, 3 * MiB);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < 3 * MiB; ++i) sum += static_cast<const std::uint8_t*>(scratch)[i];
    *result = sum;
  });
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, stream) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  REQUIRE(*result == expected);

  for (SleepMode mode : {SleepMode::backup, SleepMode::discard}) {
    REQUIRE(pool.sleep(mode, stream) == cudaSuccess);
    CHECK(sim.counters().physical_bytes == 0);  // the graph's memory went too
    REQUIRE(pool.wake(stream) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
    if (mode == SleepMode::discard) fill(input);  // dropped: the caller fills it again
    *result = 0;
    REQUIRE(sim.graph_launch(exec, stream) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
    CHECK(*result == expected);
    CHECK(intact(input));
  }
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  pool.deallocate(input.ptr, stream);
  pool.deallocate(result, stream);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  pool.check_invariants();
  sim.destroy_stream(stream);
}
