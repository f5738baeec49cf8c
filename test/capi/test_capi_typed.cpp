// C++ overloads of the allocation calls for typed pointers (sova.h), as
// cuda_runtime.h has them for cudaMallocAsync & co.: each must reach the C
// function it stands for, on the pool and stream given.
#include "capi/capi_test_util.hpp"

#include <type_traits>

using namespace sova::capi_test;

namespace {
struct Pair {
  double a, b;
};
}  // namespace

TEST_CASE("capi: typed pointers allocate as void** does (C++ overloads)", "[capi][typed]") {
  ScopedPool pool;
  ScopedStream s;
  float* f = nullptr;
  Pair* pairs = nullptr;
  int* ints = nullptr;
  unsigned char* bytes = nullptr;
  static_assert(std::is_same_v<decltype(sovaMallocFromPoolAsync(&f, 4, pool.get(), s)), cudaError_t>);

  REQUIRE(sovaMallocFromPoolAsync(&f, 1024 * sizeof(float), pool, s) == cudaSuccess);
  CHECK(f != nullptr);
  CHECK(used(pool) == 4096);
  // The runtime's four-argument cudaMallocAsync(ptr, size, pool, stream).
  REQUIRE(sovaMallocAsync(&pairs, 10 * sizeof(Pair), pool, s) == cudaSuccess);
  CHECK(used(pool) == 4096 + 160);
  REQUIRE(sovaMallocFromPoolAsync_ptsz(&ints, 256, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocAsync_ptsz(&bytes, 100, pool, s) == cudaSuccess);
  CHECK(used(pool) == 4096 + 160 + 256 + 100);
  CHECK(sovaFreeAsync(f, s) == cudaSuccess);
  CHECK(sovaFreeAsync(pairs, s) == cudaSuccess);
  CHECK(sovaFreeAsync(ints, s) == cudaSuccess);
  CHECK(sovaFreeAsync(bytes, s) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: typed sovaMallocAsync uses the device's current pool", "[capi][typed]") {
  ScopedPool pool;
  ScopedStream s;
  REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
  double* d = nullptr;
  const cudaError_t err = sovaMallocAsync(&d, 8 * sizeof(double), s);
  CHECK(err == cudaSuccess);
  CHECK(used(pool) == 64);
  float* g = nullptr;
  CHECK(sovaMallocAsync_ptsz(&g, 32, s) == cudaSuccess);
  CHECK(used(pool) == 96);
  CHECK(sovaFreeAsync(d, s) == cudaSuccess);
  CHECK(sovaFreeAsync(g, s) == cudaSuccess);
  REQUIRE(sovaDeviceSetMemPool(0, default_pool(0)) == cudaSuccess);
}

TEST_CASE("capi: typed overloads keep the C functions' errors", "[capi][typed]") {
  ScopedPool pool;
  ScopedStream s;
  // A null result pointer still reaches the C function (no T to deduce).
  CHECK(sovaMallocAsync(nullptr, 16, s) == cudaErrorInvalidValue);
  CHECK(sovaMallocAsync(nullptr, 16, pool.get(), s) == cudaErrorInvalidValue);
  // A destroyed pool through a typed call: cudaErrorInvalidValue, NULL result.
  sovaMemPool_t gone = nullptr;
  const sovaMemPoolProps props = props_on(0);
  REQUIRE(sovaMemPoolCreate(&gone, &props) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(gone) == cudaSuccess);
  int* p = reinterpret_cast<int*>(0x10);
  CHECK(sovaMallocFromPoolAsync(&p, 64, gone, s) == cudaErrorInvalidValue);
  CHECK(p == nullptr);
  CHECK(used(pool) == 0);
}
