// C API: default and current pools per device (sovaDeviceGetDefaultMemPool,
// sovaDeviceGetMemPool, sovaDeviceSetMemPool) and the per-thread default
// stream variants.
#include "capi/capi_test_util.hpp"

#include <chrono>

using namespace sova::capi_test;

namespace {

sovaMemPool_t current_pool(int device) {
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&pool, device) == cudaSuccess);
  return pool;
}

}  // namespace

TEST_CASE("capi: each device has its own default pool, current until another is set", "[capi]") {
  const sovaMemPool_t d0 = default_pool(0);
  const sovaMemPool_t d1 = default_pool(1);
  CHECK(d0 != d1);
  CHECK(default_pool(0) == d0);  // made once
  CHECK(current_pool(0) == d0);
  CHECK(current_pool(1) == d1);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 512, d1, s) == cudaSuccess);
  const std::uint64_t used_d0 = used(d0);
  CHECK(used(d1) >= 512);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(used(d0) == used_d0);
}

TEST_CASE("capi: device arguments out of range give the runtime's codes", "[capi]") {
  sim();
  sovaMemPool_t q = reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x1234});
  CHECK(sovaDeviceGetDefaultMemPool(&q, 99) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetDefaultMemPool(&q, 2) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetDefaultMemPool(&q, -1) == cudaErrorInvalidDevice);
  CHECK(sovaDeviceGetDefaultMemPool(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGetMemPool(&q, 99) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGetMemPool(&q, -1) == cudaErrorInvalidValue);
  CHECK(sovaDeviceGetMemPool(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(q == reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x1234}));  // untouched
  const sovaMemPool_t def = default_pool(0);
  CHECK(sovaDeviceSetMemPool(0, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(99, def) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(-1, def) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0xdeadbeef})) == cudaErrorInvalidValue);
  CHECK(current_pool(0) == def);
}

TEST_CASE("capi: a pool set current serves sovaMallocAsync until it is destroyed", "[capi]") {
  const sovaMemPool_t def = default_pool(0);
  sovaMemPool_t pool = ScopedPool().release();
  ScopedStream s;
  REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
  CHECK(current_pool(0) == pool);
  CHECK(default_pool(0) == def);

  const std::uint64_t used_def = used(def);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 777, s) == cudaSuccess);
  CHECK(used(pool) == 777);
  CHECK(used(def) == used_def);
  void* p2 = nullptr;
  REQUIRE(sovaMallocAsync_ptsz(&p2, 100, s) == cudaSuccess);
  CHECK(used(pool) == 877);
  CHECK(sovaFreeAsync(p2, s) == cudaSuccess);

  // Destroying the current pool makes the default current again, even while
  // one of its blocks is live.
  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(current_pool(0) == def);
  void* q = nullptr;
  REQUIRE(sovaMallocAsync(&q, 333, s) == cudaSuccess);
  CHECK(used(def) == used_def + 333);
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);  // the deferred pool's last block
  CHECK(used(def) == used_def);
}

TEST_CASE("capi: setting the default pool back, and pools of another device", "[capi]") {
  const sovaMemPool_t d0 = default_pool(0);
  const sovaMemPool_t d1 = default_pool(1);
  ScopedPool on1(1);
  CHECK(sovaDeviceSetMemPool(0, on1) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, d1) == cudaErrorInvalidValue);
  CHECK(current_pool(0) == d0);
  REQUIRE(sovaDeviceSetMemPool(1, on1) == cudaSuccess);
  CHECK(current_pool(1) == on1.get());
  CHECK(current_pool(0) == d0);
  REQUIRE(sovaDeviceSetMemPool(1, d1) == cudaSuccess);
  CHECK(current_pool(1) == d1);
  REQUIRE(sovaDeviceSetMemPool(1, on1) == cudaSuccess);
  // ~ScopedPool destroys it: device 1 falls back to its default (checked below).
}

TEST_CASE("capi: after a test destroyed a current pool, the default is current", "[capi]") {
  CHECK(current_pool(0) == default_pool(0));
  CHECK(current_pool(1) == default_pool(1));
}

TEST_CASE("capi: _ptsz variants take stream 0 as the per-thread default stream", "[capi]") {
  ScopedPool pool;
  // No cross-stream reuse at all: a block freed on one stream can then come
  // back only to the same stream, which tells which stream a free went to.
  int off = 0;
  for (const auto a : {cudaMemPoolReuseFollowEventDependencies, cudaMemPoolReuseAllowOpportunistic,
                       cudaMemPoolReuseAllowInternalDependencies})
    REQUIRE(sovaMemPoolSetAttribute(pool, a, &off) == cudaSuccess);

  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync_ptsz(&p, 4096, pool, nullptr) == cudaSuccess);
  // Keep the per-thread stream busy so the free stays pending.
  sim().delay(cudaStreamPerThread, std::chrono::milliseconds(100));
  REQUIRE(sovaFreeAsync_ptsz(p, nullptr) == cudaSuccess);
  void* on_legacy = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&on_legacy, 4096, pool, cudaStreamLegacy) == cudaSuccess);
  CHECK(on_legacy != p);
  void* on_per_thread = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&on_per_thread, 4096, pool, cudaStreamPerThread) == cudaSuccess);
  CHECK(on_per_thread == p);

  // Without _ptsz, 0 is the legacy stream.
  void* r = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&r, 8192, pool, nullptr) == cudaSuccess);
  REQUIRE(sovaFreeAsync(r, nullptr) == cudaSuccess);
  void* r2 = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&r2, 8192, pool, cudaStreamLegacy) == cudaSuccess);
  CHECK(r2 == r);

  CHECK(sovaFreeAsync(on_legacy, cudaStreamLegacy) == cudaSuccess);
  CHECK(sovaFreeAsync(r2, cudaStreamLegacy) == cudaSuccess);
  CHECK(sovaFreeAsync_ptsz(on_per_thread, nullptr) == cudaSuccess);
  CHECK(sim().stream_synchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK(sim().stream_synchronize(cudaStreamLegacy) == cudaSuccess);
}
