// The PyTorch adapter given a stream value that names no stream, on the
// simulation (docs/runtime-errors.md, "Bad input, route by route"): the
// allocation is refused with the C API's words, nothing allocated; a free on
// it is refused and counted (freeErrors), the block kept live, since
// PyTorch's free cannot fail.
#include "support/catch.hpp"

#include "sova_torch.h"
#include "torch_adapter/adapter_sim.hpp"

#include <cstdint>
#include <cstring>
#include <string>

using sova::torch_adapter_test::sim;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

sovaTorchStats torch_stats() {
  sovaTorchStats s;
  std::memset(&s, 0, sizeof s);
  s.pool.structSize = sizeof s.pool;
  REQUIRE(sova_torch_get_stats(0, &s) == cudaSuccess);
  return s;
}

cudaStream_t no_stream() { return reinterpret_cast<cudaStream_t>(std::uintptr_t{12345}); }

}  // namespace

TEST_CASE("torch adapter: a stream value that names no stream is refused, with the C API's words",
          "[torch_adapter][bad_input]") {
  sim();
  void* warm = sova_torch_malloc_nothrow(MiB, 0, nullptr);  // the device's pool exists
  REQUIRE(warm != nullptr);
  const sovaTorchStats before = torch_stats();
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sova_torch_try_malloc(&p, 4096, 0, no_stream()) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);
  const std::string why = sova_torch_last_error();
  INFO(why);
  CHECK(why.find("names no stream") != std::string::npos);
  CHECK(torch_stats().pool.streamStates == before.pool.streamStates);
  CHECK(torch_stats().pool.liveBlocks == before.pool.liveBlocks);

  // A free on it: refused and counted, the block still live, freed afterwards.
  sova_torch_free(warm, MiB, 0, no_stream());
  const sovaTorchStats refused = torch_stats();
  CHECK(refused.freeErrors == before.freeErrors + 1);
  CHECK(refused.pool.liveBlocks == before.pool.liveBlocks);
  CHECK(refused.pool.streamStates == before.pool.streamStates);
  sova_torch_free(warm, MiB, 0, nullptr);
  CHECK(torch_stats().pool.liveBlocks == before.pool.liveBlocks - 1);
}
