// C API: sovaMallocAsync / sovaFreeAsync / sovaMallocFromPoolAsync, one test
// per row of docs/runtime-errors.md that concerns them, each checking
// that a rejected call changed nothing.
#include "capi/capi_test_util.hpp"
#include "support/scoped_current_device.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

using namespace sova::capi_test;

TEST_CASE("capi: size 0 gives NULL and cudaSuccess; freeing NULL is cudaSuccess", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = reinterpret_cast<void*>(0x1234);
  CHECK(sovaMallocAsync(&p, 0, s) == cudaSuccess);
  CHECK(p == nullptr);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  p = reinterpret_cast<void*>(0x1234);
  CHECK(sovaMallocFromPoolAsync(&p, 0, pool, s) == cudaSuccess);
  CHECK(p == nullptr);
  CHECK(sovaFreeAsync(nullptr, s) == cudaSuccess);
  CHECK(sovaFreeAsync_ptsz(nullptr, nullptr) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: a NULL result pointer is cudaErrorInvalidValue and allocates nothing", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  const std::uint64_t used_before = used(default_pool(0));
  CHECK(sovaMallocAsync(nullptr, 16, s) == cudaErrorInvalidValue);
  CHECK(sovaMallocAsync_ptsz(nullptr, 16, s) == cudaErrorInvalidValue);
  CHECK(sovaMallocFromPoolAsync(nullptr, 16, pool, s) == cudaErrorInvalidValue);
  CHECK(sovaMallocFromPoolAsync_ptsz(nullptr, 16, pool, s) == cudaErrorInvalidValue);
  CHECK(used(default_pool(0)) == used_before);
  CHECK(used(pool) == 0);
  CHECK(reserved(pool) == 0);
}

TEST_CASE("capi: sovaMallocAsync allocates from the current device's current pool", "[capi]") {
  ScopedStream s;
  sovaMemPool_t current = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
  const std::uint64_t used_before = used(current);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 3000, s) == cudaSuccess);
  REQUIRE(p != nullptr);
  CHECK(used(current) == used_before + 3000);
  fill_on(s, p, 3000, 0x5a);
  s.synchronize();
  CHECK(holds(p, 3000, 0x5a));
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(used(current) == used_before);
}

TEST_CASE("capi: sovaMallocAsync on another device's stream allocates from that device's pool", "[capi]") {
  // As cudaMallocAsync: "from the current mempool of the provided stream's
  // device", whatever the current device (here 0).
  sim();
  const cudaStream_t s1 = sim().create_stream(false, /*device=*/1);
  sovaMemPool_t pool0 = nullptr, pool1 = nullptr;
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 3000, s1) == cudaSuccess);  // creates device 1's default pool if needed
  REQUIRE(sovaDeviceGetMemPool(&pool0, 0) == cudaSuccess);
  REQUIRE(sovaDeviceGetMemPool(&pool1, 1) == cudaSuccess);
  REQUIRE(pool0 != pool1);
  const std::uint64_t used0 = used(pool0), used1 = used(pool1);
  CHECK(used1 >= 3000);
  void* q = nullptr;
  REQUIRE(sovaMallocAsync(&q, 5000, s1) == cudaSuccess);
  CHECK(used(pool1) == used1 + 5000);
  CHECK(used(pool0) == used0);
  CHECK(sovaFreeAsync(q, s1) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s1) == cudaSuccess);
  CHECK(used(pool1) == used1 - 3000);
  REQUIRE(sim().stream_synchronize(s1) == cudaSuccess);
  sim().destroy_stream(s1);
}

TEST_CASE("capi: with device 1 current, stream 0 is device 1's and allocates from device 1's pool", "[capi][devices]") {
  sova::test::ScopedCurrentDevice on_device_1(sim(), 1);
  void* p = nullptr;
  REQUIRE(sovaMallocAsync(&p, 3000, nullptr) == cudaSuccess);
  sovaMemPool_t pool0 = nullptr, pool1 = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&pool0, 0) == cudaSuccess);
  REQUIRE(sovaDeviceGetMemPool(&pool1, 1) == cudaSuccess);
  const std::uint64_t used0 = used(pool0), used1 = used(pool1);
  void* q = nullptr;
  REQUIRE(sovaMallocAsync(&q, 5000, cudaStreamPerThread) == cudaSuccess);
  CHECK(used(pool1) == used1 + 5000);
  CHECK(used(pool0) == used0);
  // A device-0 stream still takes device 0's pool.
  const cudaStream_t s0 = sim().create_stream(false, /*device=*/0);
  void* r = nullptr;
  REQUIRE(sovaMallocAsync(&r, 7000, s0) == cudaSuccess);
  CHECK(used(pool0) == used0 + 7000);
  CHECK(sovaFreeAsync(r, s0) == cudaSuccess);
  CHECK(sovaFreeAsync(q, cudaStreamPerThread) == cudaSuccess);
  CHECK(sovaFreeAsync(p, nullptr) == cudaSuccess);
  CHECK(used(pool1) == used1 - 3000);
  REQUIRE(sim().stream_synchronize(s0) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(nullptr) == cudaSuccess);
  sim().destroy_stream(s0);
}

TEST_CASE("capi: sovaMallocAsync on a destroyed stream handle is an error and allocates nothing", "[capi]") {
  sim();
  const cudaStream_t gone = sim().create_stream();
  sim().destroy_stream(gone);
  sovaMemPool_t pool0 = nullptr;
  REQUIRE(sovaDeviceGetMemPool(&pool0, 0) == cudaSuccess);
  const std::uint64_t used0 = used(pool0);
  void* p = reinterpret_cast<void*>(0x1234);
  CHECK(sovaMallocAsync(&p, 3000, gone) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);
  CHECK(used(pool0) == used0);
}

TEST_CASE("capi: an impossible size is cudaErrorMemoryAllocation with NULL; the next works", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  for (const std::size_t size : {std::size_t{1} << 50, (std::size_t{1} << 30) + MiB}) {
    void* p = reinterpret_cast<void*>(0x1234);
    CHECK(sovaMallocFromPoolAsync(&p, size, pool, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    CHECK(used(pool) == 0);
    CHECK(reserved(pool) == 0);
  }
  const std::uint64_t used_before = used(default_pool(0));
  void* p = reinterpret_cast<void*>(0x1234);
  CHECK(sovaMallocAsync(&p, std::size_t{1} << 50, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(used(default_pool(0)) == used_before);

  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&q, 256, pool, s) == cudaSuccess);
  CHECK(q != nullptr);
  CHECK(used(pool) == 256);
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
}

TEST_CASE("capi: freeing a pointer no pool handed out is cudaErrorInvalidValue", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* live = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&live, 4096, pool, s) == cudaSuccess);
  fill_on(s, live, 4096, 0x11);
  static int host_static = 0;
  int host_stack = 0;
  void* host_heap = std::malloc(64);
  CHECK(sovaFreeAsync(&host_static, s) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(&host_stack, s) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(host_heap, s) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync_ptsz(host_heap, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(reinterpret_cast<void*>(0x1000), s) == cudaErrorInvalidValue);
  std::free(host_heap);
  s.synchronize();
  CHECK(used(pool) == 4096);
  CHECK(holds(live, 4096, 0x11));
  CHECK(sovaFreeAsync(live, s) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: an interior pointer is cudaErrorInvalidValue; the block stays live and intact", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  fill_on(s, p, 4096, 0x77);
  CHECK(sovaFreeAsync(static_cast<char*>(p) + 256, s) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(static_cast<char*>(p) + 1, s) == cudaErrorInvalidValue);
  s.synchronize();
  CHECK(used(pool) == 4096);
  CHECK(holds(p, 4096, 0x77));
  // Still live: another allocation does not get it.
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&q, 4096, pool, s) == cudaSuccess);
  CHECK(q != p);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: a double free is cudaErrorInvalidValue, before or after a synchronize", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  void* other = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&other, 8192, pool, s) == cudaSuccess);
  fill_on(s, other, 8192, 0x42);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  CHECK(used(pool) == 8192);
  s.synchronize();
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  CHECK(used(pool) == 8192);
  CHECK(holds(other, 8192, 0x42));
  CHECK(sovaFreeAsync(other, s) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: used counts requested bytes, drops at free; pointers are 512-byte aligned", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 1, pool, s) == cudaSuccess);
  CHECK(used(pool) == 1);
  REQUIRE(sovaMallocFromPoolAsync(&q, 3000, pool, s) == cudaSuccess);
  CHECK(used(pool) == 3001);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 512 == 0);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(used(pool) == 3000);  // at once, before the stream ran the free
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
  CHECK(used(pool) == 0);
  CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 3001);
}

TEST_CASE("capi: the first small allocation reserves one granule", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 1, pool, s) == cudaSuccess);
  sova::DeviceInfo info;
  REQUIRE(sim().device_info(0, &info) == cudaSuccess);
  CHECK(reserved(pool) == info.granularity);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("capi: a pool's maxSize bounds what it hands out", "[capi]") {
  ScopedPool pool(0, 64 * MiB);
  ScopedStream s;
  void* p = nullptr;
  void* r = reinterpret_cast<void*>(0x1234);
  REQUIRE(sovaMallocFromPoolAsync(&p, 32 * MiB, pool, s) == cudaSuccess);
  CHECK(sovaMallocFromPoolAsync(&r, 48 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(r == nullptr);
  CHECK(sovaMallocFromPoolAsync(&r, 65 * MiB, pool, s) == cudaErrorMemoryAllocation);
  CHECK(r == nullptr);
  CHECK(used(pool) == 32 * MiB);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("capi: NULL, garbage and destroyed pools are cudaErrorInvalidValue for allocation", "[capi]") {
  ScopedStream s;
  sovaMemPool_t destroyed = ScopedPool().release();
  REQUIRE(sovaMemPoolDestroy(destroyed) == cudaSuccess);
  int stack_object = 0;
  const sovaMemPool_t bad[] = {
      nullptr,
      destroyed,
      reinterpret_cast<sovaMemPool_t>(&stack_object),
      reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0xdeadbeef}),
      reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x5}),
      reinterpret_cast<sovaMemPool_t>(~std::uintptr_t{0}),
  };
  for (sovaMemPool_t pool : bad) {
    void* p = reinterpret_cast<void*>(0x1234);
    CHECK(sovaMallocFromPoolAsync(&p, 16, pool, s) == cudaErrorInvalidValue);
    CHECK(p == nullptr);
    CHECK(sovaMallocFromPoolAsync_ptsz(&p, 16, pool, s) == cudaErrorInvalidValue);
  }
}

TEST_CASE("capi: data written through a block survives other blocks' traffic", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  ScopedStream t;
  std::vector<void*> blocks;
  for (int i = 0; i < 32; ++i) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 4096 * (i + 1), pool, i % 2 ? s : t) == cudaSuccess);
    fill_on(i % 2 ? s : t, p, 4096 * (i + 1), static_cast<unsigned char>(i));
    blocks.push_back(p);
  }
  // Free the even ones, allocate again over them; odd ones must be untouched.
  for (int i = 0; i < 32; i += 2) CHECK(sovaFreeAsync(blocks[i], t) == cudaSuccess);
  for (int i = 0; i < 32; i += 2) {
    REQUIRE(sovaMallocFromPoolAsync(&blocks[i], 4096 * (i + 1), pool, t) == cudaSuccess);
    fill_on(t, blocks[i], 4096 * (i + 1), 0xee);
  }
  s.synchronize();
  t.synchronize();
  for (int i = 1; i < 32; i += 2) CHECK(holds(blocks[i], 4096 * (i + 1), static_cast<unsigned char>(i)));
  for (int i = 0; i < 32; i += 2) CHECK(holds(blocks[i], 4096 * (i + 1), 0xee));
  for (int i = 0; i < 32; ++i) CHECK(sovaFreeAsync(blocks[i], s) == cudaSuccess);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: device memory of another allocator is not sova's to free", "[capi]") {
  // What cudaMalloc would hand out: mapped, accessible device memory outside
  // every sova pool. The runtime's cudaFreeAsync accepts such a pointer; sova
  // refuses it (docs/c-api.md).
  ScopedPool pool;  // at least one pool listed
  sova::DeviceInfo info;
  REQUIRE(sim().device_info(0, &info) == cudaSuccess);
  const std::size_t bytes = info.granularity;
  std::uintptr_t va = 0;
  sova::PhysicalHandle chunk = 0;
  REQUIRE(sim().address_reserve(bytes, bytes, &va) == cudaSuccess);
  REQUIRE(sim().physical_create(0, bytes, &chunk) == cudaSuccess);
  REQUIRE(sim().map(va, bytes, chunk) == cudaSuccess);
  cudaMemAccessDesc desc{};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(sim().set_access(va, bytes, &desc, 1) == cudaSuccess);
  std::memset(reinterpret_cast<void*>(va), 0x21, bytes);

  ScopedStream s;
  CHECK(sovaFreeAsync(reinterpret_cast<void*>(va), s) == cudaErrorInvalidValue);
  s.synchronize();
  CHECK(holds(reinterpret_cast<void*>(va), bytes, 0x21));
  CHECK(used(pool) == 0);

  REQUIRE(sim().unmap(va, bytes) == cudaSuccess);
  REQUIRE(sim().physical_release(chunk) == cudaSuccess);
  REQUIRE(sim().address_free(va, bytes) == cudaSuccess);
}

TEST_CASE("capi: with release threshold 0, freed memory goes back to the device", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 6 * MiB, pool, s) == cudaSuccess);
  CHECK(reserved(pool) >= 6 * MiB);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  s.synchronize();
  // The runtime releases at the synchronize, which sova cannot see: it
  // releases once the pool notices the frees complete (docs/c-api.md).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (reserved(pool) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(reserved(pool) == 0);
  CHECK(used(pool) == 0);
}

TEST_CASE("capi: sovaMemPoolStreamSynchronized lets another stream reuse the frees at once", "[capi]") {
  sim();
  for (const bool told : {false, true}) {
    INFO("sovaMemPoolStreamSynchronized called: " << told);
    ScopedPool pool;
    const int off = 0;
    REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, const_cast<int*>(&off)) ==
            cudaSuccess);
    ScopedStream a;
    ScopedStream b;
    constexpr std::size_t kSmall = std::size_t{1} << 20;  // small: no fence of its own
    void* p = nullptr;
    void* filler = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, kSmall, pool, a) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&filler, kSmall, pool, b) == cudaSuccess);  // fills p's granule
    REQUIRE(sovaFreeAsync(p, a) == cudaSuccess);
    REQUIRE(sim().stream_synchronize(a) == cudaSuccess);
    if (told) REQUIRE(sovaMemPoolStreamSynchronized(pool, a) == cudaSuccess);
    void* q = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&q, kSmall, pool, b) == cudaSuccess);
    CHECK((q == p) == told);  // without being told, nothing proves A's free complete: B grows
    CHECK(sovaFreeAsync(q, b) == cudaSuccess);
    CHECK(sovaFreeAsync(filler, b) == cudaSuccess);
  }
  ScopedPool pool;
  CHECK(sovaMemPoolStreamSynchronized_ptsz(pool, nullptr) == cudaSuccess);  // 0: the per-thread stream
  CHECK(sovaMemPoolStreamSynchronized(nullptr, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolStreamSynchronized(reinterpret_cast<sovaMemPool_t>(0x5), nullptr) == cudaErrorInvalidValue);
}
