// Graph memory sleeps with its tag (docs/sleep-wake.md, "Graph memory"), on
// the simulation, through the adapter's two paths: the pluggable backend's
// allocations during a capture (sova's graph memory in the tag's pool) and
// the native backend's segments asked for during a capture (ordinary memory
// of the tag's pool, held by PyTorch's graph pool). The tag's pool sleeps
// without backup and zeroes on wake; the memory goes back to the device
// while asleep; the graph replays after wake at the same addresses.
#include "support/catch.hpp"

#include "graph_hooks.hpp"
#include "sova_torch.h"
#include "support/capi_stats.hpp"
#include "torch_adapter/adapter_sim.hpp"

#include <sova/sim.hpp>
#include <sova/sova.h>

#include <algorithm>
#include <cstring>

using sova::test::stats_of;
using sova::torch_adapter_test::sim;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;
constexpr int kTag = 7;  // any of 1 .. 63

bool all_bytes(const void* p, std::size_t n, unsigned char value) {
  const auto* b = static_cast<const unsigned char*>(p);
  return std::all_of(b, b + n, [value](unsigned char c) { return c == value; });
}

/// The calling thread's tag for the scope (sova.torch.tag).
class TagScope {
 public:
  explicit TagScope(int tag) : previous_(sova_torch_set_tag(tag)) {}
  ~TagScope() { sova_torch_set_tag(previous_); }
  TagScope(const TagScope&) = delete;
  TagScope& operator=(const TagScope&) = delete;

 private:
  int previous_;
};

/// Puts `pool` to sleep without backup, zeroing on wake, and wakes it on
/// `s`: its physical memory goes back to the device meanwhile.
void sleep_and_wake_zeroed(sovaMemPool_t pool, cudaStream_t s) {
  const std::uint64_t held = stats_of(pool).reservedCurrent;
  REQUIRE(held > 0);
  const std::size_t physical_awake = sim().counters().physical_bytes;
  REQUIRE(sovaMemPoolSleep(pool, sovaSleepDiscardZeroed, s) == cudaSuccess);
  CHECK(stats_of(pool).reservedCurrent == 0);
  CHECK(sim().counters().physical_bytes + held <= physical_awake);
  REQUIRE(sovaMemPoolWake(pool, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
}

}  // namespace

TEST_CASE("torch adapter: graph memory captured under a tag sleeps with it and the graph replays after wake",
          "[torch_adapter][capture][sleep]") {
  cudaStream_t s = sim().create_stream();
  sovaMemPool_t pool = nullptr;
  {
    TagScope tagged(kTag);
    void* warm = sova_torch_malloc_nothrow(MiB, 0, s);  // the tag's pool exists before the capture
    REQUIRE(warm != nullptr);
    sova_torch_free(warm, MiB, 0, s);
    pool = sova_torch_tag_pool(kTag, 0);
  }
  REQUIRE(pool != nullptr);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  auto* input = static_cast<unsigned char*>(sova_torch_malloc_nothrow(MiB, 0, s));  // untagged: never sleeps
  REQUIRE(input != nullptr);
  std::memset(input, 0x21, MiB);

  const bool native = GENERATE(false, true);
  CAPTURE(native);
  // The graph: scratch = input + 1 in every byte; out = scratch + 1.
  void* scratch = nullptr;
  void* out = nullptr;
  REQUIRE(sim().begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  {
    TagScope tagged(kTag);
    if (native) {  // PyTorch's graph pool asks sova for segments
      scratch = sova_torch_malloc_segment(2 * MiB, 0, s);
      out = sova_torch_malloc_segment(2 * MiB, 0, s);
    } else {  // the pluggable backend: the allocations themselves
      scratch = sova_torch_malloc_nothrow(MiB, 0, s);
      out = sova_torch_malloc_nothrow(MiB, 0, s);
    }
  }
  INFO(sova_torch_last_error());
  REQUIRE((scratch != nullptr && out != nullptr));
  sim().launch(s, [input, scratch, out] {
    auto* sc = static_cast<unsigned char*>(scratch);
    auto* o = static_cast<unsigned char*>(out);
    for (std::size_t i = 0; i < MiB; ++i) sc[i] = static_cast<unsigned char>(input[i] + 1);
    for (std::size_t i = 0; i < MiB; ++i) o[i] = static_cast<unsigned char>(sc[i] + 1);
  });
  if (!native) sova_torch_free(scratch, MiB, 0, s);  // an intermediate freed inside the capture: the graph keeps it
  cudaGraph_t graph = nullptr;
  REQUIRE(sim().end_capture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim().graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim().graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  CHECK(all_bytes(out, MiB, 0x23));
  // The graph's memory is the tag's: the pluggable backend's as graph memory.
  std::uint64_t graph_bytes = 0;
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, &graph_bytes) == cudaSuccess);
  CHECK(graph_bytes == (native ? 0 : 2 * MiB));
  CHECK(stats_of(pool).usedCurrent >= 2 * MiB);

  for (unsigned char value : {0x40, 0x7f}) {
    sleep_and_wake_zeroed(pool, s);
    CHECK(all_bytes(out, MiB, 0));  // zeroed on wake, until the graph writes it again
    std::memset(input, value, MiB);
    REQUIRE(sim().graph_launch(exec, s) == cudaSuccess);
    REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
    CHECK(all_bytes(out, MiB, static_cast<unsigned char>(value + 2)));
  }

  REQUIRE(sim().graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim().graph_destroy(graph) == cudaSuccess);
  if (native) {
    sova_torch_free_segment(scratch, 2 * MiB, 0, s);
    sova_torch_free_segment(out, 2 * MiB, 0, s);
  } else {
    sova_torch_free(out, MiB, 0, s);  // the graph's output: the caller's to free
  }
  sova_torch_free(input, MiB, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  void* probe = sova_torch_malloc_nothrow(256, 0, s);  // the pool takes released graphs back at a call
  sova_torch_free(probe, 256, 0, s);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  {
    TagScope tagged(kTag);
    void* tagged_probe = sova_torch_malloc_nothrow(256, 0, s);
    sova_torch_free(tagged_probe, 256, 0, s);
  }
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  CHECK(stats_of(pool).usedCurrent == 0);
  sim().destroy_stream(s);
}
