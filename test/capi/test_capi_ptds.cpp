// C API as seen by code built with `nvcc --default-stream per-thread`:
// sova.h maps the three stream calls to their _ptsz variants, so stream 0
// means the calling thread's default stream.
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "capi/capi_test_util.hpp"

#include <chrono>
#include <string_view>

#define SOVA_TEST_STR2(x) #x
#define SOVA_TEST_STR(x) SOVA_TEST_STR2(x)
static_assert(std::string_view(SOVA_TEST_STR(sovaMallocAsync)) == "sovaMallocAsync_ptsz");
static_assert(std::string_view(SOVA_TEST_STR(sovaFreeAsync)) == "sovaFreeAsync_ptsz");
static_assert(std::string_view(SOVA_TEST_STR(sovaMallocFromPoolAsync)) == "sovaMallocFromPoolAsync_ptsz");

using namespace sova::capi_test;

TEST_CASE("capi (per-thread default stream build): stream 0 is cudaStreamPerThread", "[capi]") {
  ScopedPool pool;
  int off = 0;
  for (const auto a : {cudaMemPoolReuseFollowEventDependencies, cudaMemPoolReuseAllowOpportunistic,
                       cudaMemPoolReuseAllowInternalDependencies})
    REQUIRE(sovaMemPoolSetAttribute(pool, a, &off) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 2048, pool, 0) == cudaSuccess);
  sim().delay(cudaStreamPerThread, std::chrono::milliseconds(50));
  REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
  // Only the stream the free went to may have the block back while it is pending.
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&q, 2048, pool, cudaStreamPerThread) == cudaSuccess);
  CHECK(q == p);
  CHECK(sovaFreeAsync(q, 0) == cudaSuccess);
  CHECK(sim().stream_synchronize(cudaStreamPerThread) == cudaSuccess);
}
