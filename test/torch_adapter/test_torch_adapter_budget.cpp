// The driver-call budget's PyTorch rows (docs/design.md, "Driver calls per
// pair", the rows named "torch adapter ..."): what CUDAPluggableAllocator's
// alloc and free (sova_torch_malloc, sova_torch_free) ask of the driver per
// steady-state pair on the caller's thread. The adapter's pools here have
// sova_torch's C defaults (release threshold 0): this executable's other
// tests share its pools, made before any configure could change them.
// sova.torch's Python default keeps all (UINT64_MAX); the adapter adds no
// call to the pool's either way, which these rows show against the Pool rows.
#include "budget/budget_measure.hpp"
#include "sova_torch.h"
#include "torch_adapter/adapter_sim.hpp"

using sova::torch_adapter_test::sim;
using namespace sova::budget;

namespace {

Measured torch_pairs(const std::string& name, std::size_t bytes, cudaStream_t stream) {
  Measured m{name, measure(sim(), [&] {
               void* p = sova_torch_malloc(bytes, 0, stream);
               REQUIRE(p != nullptr);
               sim().launch(stream, [] {});
               sova_torch_free(p, bytes, 0, stream);
             })};
  REQUIRE(sim().stream_synchronize(stream) == cudaSuccess);
  return m;
}

}  // namespace

TEST_CASE("driver-call budget: the PyTorch adapter's rows as docs/design.md's table says", "[budget]") {
  std::string error;
  const std::vector<Row> table = parse_table(design_md(), &error);
  INFO(error);
  REQUIRE(!table.empty());
  const cudaStream_t s = sim().create_stream();
  std::vector<Measured> measured;
  measured.push_back(torch_pairs("torch adapter 4 KiB, threshold 0, its stream", 4096, s));
  measured.push_back(torch_pairs("torch adapter 4 MiB, threshold 0, its stream", std::size_t{4} << 20, s));
  measured.push_back(torch_pairs("torch adapter 4 KiB, threshold 0, legacy stream", 4096, nullptr));
  sim().destroy_stream(s);
  const std::string diff = compare(table, measured, "torch adapter");
  INFO(diff);
  CHECK(diff.empty());
}
