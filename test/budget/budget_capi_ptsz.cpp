// The C API as code built with `nvcc --default-stream per-thread` calls it:
// sova.h maps sovaMallocAsync & co. to their _ptsz entry points, and stream 0
// is the calling thread's default stream.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "budget/budget_measure.hpp"
#include "capi/capi_test_util.hpp"

#include <string_view>

#define SOVA_BUDGET_STR2(x) #x
#define SOVA_BUDGET_STR(x) SOVA_BUDGET_STR2(x)
static_assert(std::string_view(SOVA_BUDGET_STR(sovaMallocAsync)) == "sovaMallocAsync_ptsz");

namespace sova::budget {

std::vector<Measured> measure_capi_ptsz() {
  using capi_test::sim;
  std::vector<Measured> out;
  Measured m{"capi_ptsz stream 0, 4 KiB", measure(sim(), [] {
                void* p = nullptr;
                REQUIRE(sovaMallocAsync(&p, 4096, 0) == cudaSuccess);
                sim().launch(cudaStreamPerThread, [] {});
                REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
              })};
  REQUIRE(sim().stream_synchronize(cudaStreamPerThread) == cudaSuccess);
  out.push_back(std::move(m));
  return out;
}

}  // namespace sova::budget
