// [scenario] Bad arguments to the C API, as a user would pass them, each
// expecting the code docs/c-api.md, README ("Bad input") and sova.h promise,
// and that nothing changed: the pool's figures (sovaMemPoolGetStats and the
// attributes) equal before and after, live blocks' bytes intact.
// Written from the documentation alone. Suite 'gpu' (one GPU).
#include "gpu/scenario_checks.hpp"
#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace sova::scenario;

namespace {

sovaMemPool_t make_pool(int device = 0, std::size_t max_size = 0) {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.device = device;
  props.maxSize = max_size;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  REQUIRE(pool != nullptr);
  return pool;
}

sovaMemPool_t garbage(std::uintptr_t v) { return reinterpret_cast<sovaMemPool_t>(v); }

std::string last_message() { return sovaGetLastErrorMessage(); }

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

std::size_t device_total(int device) {
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, device) == cudaSuccess);
  return prop.totalGlobalMem;
}

}  // namespace

TEST_CASE("scenario: bad allocation arguments give the documented codes and change nothing",
          "[scenario][bad-args]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0);
  Counters wrong(1);
  sovaMemPool_t pool = make_pool(0);
  const std::uint64_t max = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, const_cast<std::uint64_t*>(&max)) ==
          cudaSuccess);

  // A live block whose bytes every refusal below must leave as they are.
  void* keep = nullptr;
  const std::size_t keep_bytes = 3 * kMiB + 777;
  REQUIRE(sovaMallocFromPoolAsync(&keep, keep_bytes, pool, s) == cudaSuccess);
  fill(0, keep, keep_bytes, 0xB10C, s);
  s.sync();
  const Figures before = figures(pool);
  void* const poison = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});

  SECTION("devPtr NULL") {
    CHECK(sovaMallocAsync(nullptr, 16, s) == cudaErrorInvalidValue);
    CHECK(sovaMallocFromPoolAsync(nullptr, 16, pool, s) == cudaErrorInvalidValue);
    CHECK(sovaMallocAsync(static_cast<void**>(nullptr), 16, pool, s) == cudaErrorInvalidValue);
    CHECK(contains(last_message(), "sovaMalloc"));
  }
  SECTION("size 0: NULL and success; freeing that NULL: success") {
    void* p = poison;
    CHECK(sovaMallocFromPoolAsync(&p, 0, pool, s) == cudaSuccess);
    CHECK(p == nullptr);
    p = poison;
    CHECK(sovaMallocAsync(&p, 0, s) == cudaSuccess);
    CHECK(p == nullptr);
    CHECK(sovaFreeAsync(nullptr, s) == cudaSuccess);
    CHECK(sovaFreeAsync(nullptr, 0) == cudaSuccess);
  }
  SECTION("sizes beyond the device: cudaErrorMemoryAllocation, *devPtr NULL, the next allocation works") {
    const std::size_t total = device_total(0);
    for (std::size_t size : {total + 1, total * 2, std::size_t{1} << 50, SIZE_MAX, SIZE_MAX - 511, SIZE_MAX / 2 + 1}) {
      CAPTURE(size);
      void* p = poison;
      CHECK(sovaMallocFromPoolAsync(&p, size, pool, s) == cudaErrorMemoryAllocation);
      CHECK(p == nullptr);
      CHECK(contains(last_message(), "sovaMallocFromPoolAsync"));
      p = poison;
      CHECK(sovaMallocAsync(&p, size, s) == cudaErrorMemoryAllocation);
      CHECK(p == nullptr);
    }
    // "A failed allocation changes nothing" (checked below), "the next allocation works as before".
    CHECK(figures(pool) == before);
    void* q = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&q, 4096, pool, s) == cudaSuccess);
    REQUIRE(q != nullptr);
    REQUIRE(sovaFreeAsync(q, s) == cudaSuccess);
    s.sync();
    REQUIRE(sovaMemPoolStreamSynchronized(pool, s) == cudaSuccess);
    // The pair above changed the counters: compare what must be back.
    const Figures after = figures(pool);
    CHECK(after.used == before.used);
    CHECK(after.live == before.live);
    count_wrong(0, keep, keep_bytes, 0xB10C, wrong.slot(0), s);
    s.sync();
    CHECK(wrong.read(0) == 0);
    REQUIRE(sovaFreeAsync(keep, s) == cudaSuccess);
    s.sync();
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    return;
  }
  SECTION("NULL, destroyed and garbage pool handles: cudaErrorInvalidValue, *devPtr NULL") {
    sovaMemPool_t dead = make_pool(0);
    REQUIRE(sovaMemPoolDestroy(dead) == cudaSuccess);
    // A new pool may take the destroyed one's slot; the old handle stays invalid.
    sovaMemPool_t successor = make_pool(0);
    std::uint64_t local = 0;
    // Garbage: values whose low four bits are not sova's handle tag 0101
    // (docs/c-api.md, "LD_PRELOAD"), so that none can name a live pool.
    const std::vector<sovaMemPool_t> bad = {nullptr, dead, garbage(0x10), garbage(0xdeadbeef0),
                                            garbage(reinterpret_cast<std::uintptr_t>(&local))};
    for (sovaMemPool_t h : bad) {
      CAPTURE(reinterpret_cast<std::uintptr_t>(h));
      void* p = poison;
      CHECK(sovaMallocFromPoolAsync(&p, 4096, h, s) == cudaErrorInvalidValue);
      CHECK(p == nullptr);
      p = poison;
      CHECK(sovaMallocAsync(&p, 4096, h, s) == cudaErrorInvalidValue);
      CHECK(p == nullptr);
      CHECK(sovaMemPoolTrimTo(h, 0) == cudaErrorInvalidValue);
      std::uint64_t v = 0;
      CHECK(sovaMemPoolGetAttribute(h, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolSetAttribute(h, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolGetGraphMemAttribute(h, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolGraphMemTrim(h) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolStreamSynchronized(h, s) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolSleep(h, sovaSleepBackup, s) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolWake(h, s) == cudaErrorInvalidValue);
      int asleep = 7;
      CHECK(sovaMemPoolIsAsleep(h, &asleep) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolReleaseSleepHostMemory(h) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolReserveSleepBackup(h, kMiB) == cudaErrorInvalidValue);
      sovaMemPoolStats st;
      std::memset(&st, 0xAB, sizeof st);
      st.structSize = sizeof st;
      CHECK(sovaMemPoolGetStats(h, &st) == cudaErrorInvalidValue);
      CHECK(st.reservedCurrent == 0xABABABABABABABABull);
      cudaMemAccessDesc own{};
      own.location.type = cudaMemLocationTypeDevice;
      own.location.id = 0;
      own.flags = cudaMemAccessFlagsProtReadWrite;
      CHECK(sovaMemPoolSetAccess(h, &own, 1) == cudaErrorInvalidValue);
      cudaMemAccessFlags flags{};
      cudaMemLocation loc{};
      loc.type = cudaMemLocationTypeDevice;
      loc.id = 0;
      CHECK(sovaMemPoolGetAccess(&flags, h, &loc) == cudaErrorInvalidValue);
      CHECK(sovaDeviceSetMemPool(0, h) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolDestroy(h) == cudaErrorInvalidValue);
    }
    // The successor works, and the device's current pool did not change.
    void* q = nullptr;
    CHECK(sovaMallocFromPoolAsync(&q, 4096, successor, s) == cudaSuccess);
    CHECK(sovaFreeAsync(q, s) == cudaSuccess);
    sovaMemPool_t current = nullptr, dflt = nullptr;
    REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
    REQUIRE(sovaDeviceGetDefaultMemPool(&dflt, 0) == cudaSuccess);
    CHECK(current == dflt);
    s.sync();
    CHECK(sovaMemPoolDestroy(successor) == cudaSuccess);
  }
  SECTION("a pool's maxSize: beyond it cudaErrorMemoryAllocation, within it works") {
    sovaMemPool_t small = make_pool(0, 64 * kMiB);
    void* a = nullptr;
    void* b = poison;
    REQUIRE(sovaMallocFromPoolAsync(&a, 32 * kMiB, small, s) == cudaSuccess);
    const Figures f = figures(small);
    CHECK(sovaMallocFromPoolAsync(&b, 48 * kMiB, small, s) == cudaErrorMemoryAllocation);
    CHECK(b == nullptr);
    b = poison;
    CHECK(sovaMallocFromPoolAsync(&b, 65 * kMiB, small, s) == cudaErrorMemoryAllocation);
    CHECK(b == nullptr);
    CHECK(figures(small) == f);
    REQUIRE(sovaMallocFromPoolAsync(&b, 16 * kMiB, small, s) == cudaSuccess);
    CHECK(sovaFreeAsync(a, s) == cudaSuccess);
    CHECK(sovaFreeAsync(b, s) == cudaSuccess);
    s.sync();
    CHECK(sovaMemPoolDestroy(small) == cudaSuccess);
  }
  SECTION("the used figure counts requested bytes; pointers are 512-byte aligned") {
    void* p = nullptr;
    void* q = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 1, pool, s) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == before.attr_used + 1);
    REQUIRE(sovaMallocFromPoolAsync(&q, 3000, pool, s) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == before.attr_used + 3001);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(q) % 512 == 0);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    // "drops at the free, before the stream reaches it"
    CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == before.attr_used + 3000);
    REQUIRE(sovaFreeAsync(q, s) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == before.attr_used);
  }
  // Every section but the one that returned: nothing changed, the block intact.
  s.sync();
  const Figures after = figures(pool);
  CHECK(after.used == before.used);
  CHECK(after.live == before.live);
  count_wrong(0, keep, keep_bytes, 0xB10C, wrong.slot(0), s);
  s.sync();
  CHECK(wrong.read(0) == 0);
  REQUIRE(sovaFreeAsync(keep, s) == cudaSuccess);
  s.sync();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("scenario: bad frees (foreign, interior, double, released pool) are refused and change nothing",
          "[scenario][bad-args]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0), s2(0);
  Counters wrong(4);
  sovaMemPool_t pool = make_pool(0);
  const std::uint64_t max = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, const_cast<std::uint64_t*>(&max)) ==
          cudaSuccess);
  void* a = nullptr;
  void* b = nullptr;
  const std::size_t a_bytes = 10000, b_bytes = 40 * kMiB + 3;
  REQUIRE(sovaMallocFromPoolAsync(&a, a_bytes, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&b, b_bytes, pool, s) == cudaSuccess);
  fill(0, a, a_bytes, 0xA, s);
  fill(0, b, b_bytes, 0xB, s);
  Figures before = figures(pool);

  auto refused = [&](void* p, cudaStream_t stream, const char* reason) {
    CAPTURE(p, reason);
    CHECK(sovaFreeAsync(p, stream) == cudaErrorInvalidValue);
    const std::string m = last_message();
    CAPTURE(m);
    CHECK(contains(m, "sovaFreeAsync"));
    CHECK(contains(m, reason));
    CHECK(figures(pool) == before);
  };

  SECTION("host memory, a cudaMalloc pointer, a pinned host pointer: not allocated by sova") {
    int on_stack = 0;
    refused(&on_stack, s, "not allocated by sova");
    std::vector<char> heap(1024);
    refused(heap.data(), s, "not allocated by sova");
    void* dev = nullptr;
    REQUIRE(cudaMalloc(&dev, kMiB) == cudaSuccess);
    refused(dev, s, "not allocated by sova");  // differs from the runtime, which accepts it (docs/c-api.md)
    REQUIRE(cudaFree(dev) == cudaSuccess);
    void* pinned = nullptr;
    REQUIRE(cudaMallocHost(&pinned, kMiB) == cudaSuccess);
    refused(pinned, s, "not allocated by sova");
    REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
  }
  SECTION("interior pointers: the block stays live, contents intact") {
    refused(static_cast<char*>(a) + 256, s, "inside a block");
    refused(static_cast<char*>(a) + 1, s, "inside a block");
    refused(static_cast<char*>(b) + b_bytes - 1, s2, "inside a block");
    refused(static_cast<char*>(b) + 32 * kMiB, s2, "inside a block");
  }
  SECTION("double free, before and after a synchronize, on the same and another stream") {
    void* c = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&c, 5000, pool, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(c, s) == cudaSuccess);
    before = figures(pool);  // the pair above counted; the refused frees change nothing more
    refused(c, s, "already freed");
    refused(c, s2, "already freed");
    s.sync();
    REQUIRE(sovaMemPoolStreamSynchronized(pool, s) == cudaSuccess);
    refused(c, s, "already freed");
    refused(c, 0, "already freed");
  }
  SECTION("memory of a pool already released") {
    sovaMemPool_t gone = make_pool(0);
    void* g = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&g, kMiB, gone, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(g, s) == cudaSuccess);
    s.sync();
    REQUIRE(sovaMemPoolDestroy(gone) == cudaSuccess);  // nothing live: released at once
    CHECK(sovaFreeAsync(g, s) == cudaErrorInvalidValue);
    CHECK(figures(pool) == before);
  }
  SECTION("a destroyed pool's live block: its bytes intact, its free succeeds once, then the pool is released") {
    sovaMemPool_t doomed = make_pool(0);
    void* d = nullptr;
    const std::size_t d_bytes = 6 * kMiB + 5;
    REQUIRE(sovaMallocFromPoolAsync(&d, d_bytes, doomed, s) == cudaSuccess);
    fill(0, d, d_bytes, 0xD, s);
    REQUIRE(sovaMemPoolDestroy(doomed) == cudaSuccess);
    count_wrong(0, d, d_bytes, 0xD, wrong.slot(1), s);
    s.sync();
    CHECK(wrong.read(1) == 0);
    CHECK(sovaFreeAsync(d, s) == cudaSuccess);
    s.sync();
    CHECK(sovaFreeAsync(d, s) == cudaErrorInvalidValue);
    CHECK(figures(pool) == before);
  }
  s.sync();
  s2.sync();
  count_wrong(0, a, a_bytes, 0xA, wrong.slot(0), s);
  count_wrong(0, b, b_bytes, 0xB, wrong.slot(0), s);
  s.sync();
  CHECK(wrong.read(0) == 0);
  REQUIRE(sovaFreeAsync(a, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(b, s) == cudaSuccess);
  s.sync();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("scenario: bad pool properties, attributes, access, statistics and device arguments",
          "[scenario][bad-args]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  sovaMemPoolProps zero;
  std::memset(&zero, 0, sizeof zero);

  SECTION("sovaMemPoolCreate: each invalid field, in the documented order") {
    sovaMemPool_t out = nullptr;
    CHECK(sovaMemPoolCreate(nullptr, &zero) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolCreate(&out, nullptr) == cudaErrorInvalidValue);
    auto refused = [&](sovaMemPoolProps p, cudaError_t want, const char* what) {
      CAPTURE(what);
      sovaMemPool_t q = nullptr;
      const cudaError_t got = sovaMemPoolCreate(&q, &p);
      CHECK(got == want);
      if (got == cudaSuccess) sovaMemPoolDestroy(q);
    };
    sovaMemPoolProps p = zero;
    p.reserved[sizeof p.reserved - 1] = 1;  // the last reserved byte, whatever the layout
    refused(p, cudaErrorInvalidValue, "a reserved byte");
    p = zero;
    p.policy = static_cast<sovaPolicy>(4);
    refused(p, cudaErrorInvalidValue, "policy 4");
    p.policy = static_cast<sovaPolicy>(-1);
    refused(p, cudaErrorInvalidValue, "policy -1");
    p = zero;
    p.flags = static_cast<unsigned>(sovaMemPoolSleepPinAhead) << 1;  // the bit above the highest flag
    refused(p, cudaErrorInvalidValue, "an unknown flag");
    p.flags = 0x80000000u;
    refused(p, cudaErrorInvalidValue, "the top flag bit");
    p.flags = sovaMemPoolNoRemap | sovaMemPoolThoroughRemap;
    refused(p, cudaErrorInvalidValue, "both remap flags");
    p = zero;
    p.handleTypes = static_cast<cudaMemAllocationHandleType>(0x100);
    refused(p, cudaErrorInvalidValue, "an unknown handle type bit");
    p = zero;
    p.hostNumaNode = -1;
    refused(p, cudaErrorInvalidValue, "a negative hostNumaNode");
    p.hostNumaNode = 1;
    refused(p, cudaErrorInvalidValue, "a hostNumaNode without sovaMemPoolHostMemory");
    p = zero;
    p.device = devices;
    refused(p, cudaErrorInvalidValue, "device == count");
    p.device = -1;
    refused(p, cudaErrorInvalidValue, "device -1");
    p.device = 9999;
    refused(p, cudaErrorInvalidValue, "device 9999");
    p = zero;
    p.handleTypes = cudaMemHandleTypeFabric;
    refused(p, cudaErrorNotSupported, "fabric handles (not built)");
    p.handleTypes = cudaMemHandleTypeWin32;
    refused(p, cudaErrorNotSupported, "a Windows handle type");
    // Order: step 2/3 (invalid) before step 4 (not supported).
    p.handleTypes = cudaMemHandleTypeFabric;
    p.device = devices;
    refused(p, cudaErrorInvalidValue, "fabric on a device out of range: the range check comes first");
    p.device = 0;
    p.reserved[0] = 1;
    refused(p, cudaErrorInvalidValue, "fabric with a reserved byte: the field check comes first");
    // A zeroed struct is valid (differs from the runtime).
    sovaMemPool_t ok = nullptr;
    REQUIRE(sovaMemPoolCreate(&ok, &zero) == cudaSuccess);
    CHECK(sovaMemPoolDestroy(ok) == cudaSuccess);
    CHECK(sovaMemPoolDestroy(ok) == cudaErrorInvalidValue);
  }
  SECTION("sovaMemPoolDestroy of the default pool, NULL: refused") {
    sovaMemPool_t dflt = nullptr;
    REQUIRE(sovaDeviceGetDefaultMemPool(&dflt, 0) == cudaSuccess);
    CHECK(sovaMemPoolDestroy(dflt) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolDestroy(nullptr) == cudaErrorInvalidValue);
    // Still the default and usable.
    void* p = nullptr;
    CHECK(sovaMallocFromPoolAsync(&p, 4096, dflt, 0) == cudaSuccess);
    CHECK(sovaFreeAsync(p, 0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  }
  SECTION("attributes: read-only figures, high marks, unknown attribute, NULL value") {
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 5 * kMiB, pool, 0) == cudaSuccess);
    const Figures before = figures(pool);
    std::uint64_t v = 5;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, static_cast<cudaMemPoolAttr>(999), &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetAttribute(pool, static_cast<cudaMemPoolAttr>(999), &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
    CHECK(figures(pool) == before);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 5 * kMiB);
    // Reuse switches: an int, any non-zero reads back 1.
    int seven = 7, got = 0;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &seven) == cudaSuccess);
    CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &got) == cudaSuccess);
    CHECK(got == 1);
    // High marks reset to the current value with 0.
    REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) >= 5 * kMiB);
    std::uint64_t zero64 = 0;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero64) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == attr(pool, cudaMemPoolAttrUsedMemCurrent));
    std::uint64_t threshold = 123 * kMiB;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == 123 * kMiB);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
  SECTION("access: descriptors out of range, revoking the own device, bad flags and locations") {
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    CHECK(sovaMemPoolSetAccess(pool, nullptr, 0) == cudaSuccess);
    CHECK(sovaMemPoolSetAccess(pool, nullptr, 1) == cudaErrorInvalidValue);
    cudaMemAccessDesc d{};
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = 0;
    d.flags = cudaMemAccessFlagsProtNone;
    CHECK(sovaMemPoolSetAccess(pool, &d, 1) == cudaErrorInvalidDevice);
    d.location.id = devices;
    d.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(sovaMemPoolSetAccess(pool, &d, 1) == cudaErrorInvalidDevice);
    d.location.id = 0;
    d.flags = static_cast<cudaMemAccessFlags>(7);
    CHECK(sovaMemPoolSetAccess(pool, &d, 1) == cudaErrorInvalidValue);
    d.flags = cudaMemAccessFlagsProtReadWrite;
    d.location.type = cudaMemLocationTypeHost;
    CHECK(sovaMemPoolSetAccess(pool, &d, 1) == cudaErrorInvalidValue);
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    cudaMemLocation loc{};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 0;
    CHECK(sovaMemPoolGetAccess(&flags, pool, &loc) == cudaSuccess);
    CHECK(flags == cudaMemAccessFlagsProtReadWrite);
    loc.id = devices;
    CHECK(sovaMemPoolGetAccess(&flags, pool, &loc) == cudaErrorInvalidValue);
    loc.id = 0;
    CHECK(sovaMemPoolGetAccess(nullptr, pool, &loc) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetAccess(&flags, pool, nullptr) == cudaErrorInvalidValue);
    // The own device's access is still read-write, and a block is usable.
    CHECK(sovaMemPoolGetAccess(&flags, pool, &loc) == cudaSuccess);
    CHECK(flags == cudaMemAccessFlagsProtReadWrite);
    Counters wrong(1);
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, kMiB, pool, 0) == cudaSuccess);
    fill(0, p, kMiB, 77, 0);
    count_wrong(0, p, kMiB, 77, wrong.slot(0), 0);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(wrong.read(0) == 0);
    REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
  SECTION("sovaMemPoolGetStats: NULL, structSize too small leave *stats unchanged; a short struct gets its fields") {
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 3 * kMiB, pool, 0) == cudaSuccess);
    CHECK(sovaMemPoolGetStats(pool, nullptr) == cudaErrorInvalidValue);
    unsigned char raw[sizeof(sovaMemPoolStats)];
    unsigned char copy[sizeof(sovaMemPoolStats)];
    for (std::size_t size : {std::size_t{0}, sizeof(std::size_t),
                             offsetof(sovaMemPoolStats, reservedCurrent) + sizeof(std::uint64_t) - 1}) {
      CAPTURE(size);
      std::memset(raw, 0xAB, sizeof raw);
      std::memcpy(raw, &size, sizeof size);
      std::memcpy(copy, raw, sizeof raw);
      CHECK(sovaMemPoolGetStats(pool, reinterpret_cast<sovaMemPoolStats*>(raw)) == cudaErrorInvalidValue);
      CHECK(std::memcmp(raw, copy, sizeof raw) == 0);
    }
    // Only reservedCurrent fits: written; everything after it untouched.
    const std::size_t just = offsetof(sovaMemPoolStats, reservedCurrent) + sizeof(std::uint64_t);
    std::memset(raw, 0xAB, sizeof raw);
    std::memcpy(raw, &just, sizeof just);
    REQUIRE(sovaMemPoolGetStats(pool, reinterpret_cast<sovaMemPoolStats*>(raw)) == cudaSuccess);
    sovaMemPoolStats got;
    std::memcpy(&got, raw, sizeof got);
    CHECK(got.reservedCurrent == attr(pool, cudaMemPoolAttrReservedMemCurrent));
    CHECK(got.reservedCurrent >= 3 * kMiB);
    for (std::size_t i = just; i < sizeof raw; ++i) {
      CAPTURE(i);
      REQUIRE(raw[i] == 0xAB);
    }
    REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
  SECTION("device calls: devices out of range, NULL outputs, a destroyed pool made current") {
    sovaMemPool_t q = nullptr;
    CHECK(sovaDeviceGetDefaultMemPool(&q, devices) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGetDefaultMemPool(&q, -1) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGetDefaultMemPool(nullptr, 0) == cudaErrorInvalidValue);
    CHECK(sovaDeviceGetMemPool(&q, devices) == cudaErrorInvalidValue);
    CHECK(sovaDeviceGetMemPool(&q, -1) == cudaErrorInvalidValue);
    CHECK(sovaDeviceGetMemPool(nullptr, 0) == cudaErrorInvalidValue);
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    CHECK(sovaDeviceSetMemPool(devices, pool) == cudaErrorInvalidValue);
    CHECK(sovaDeviceSetMemPool(-1, pool) == cudaErrorInvalidValue);
    CHECK(sovaDeviceSetMemPool(0, nullptr) == cudaErrorInvalidValue);
    // Current, then destroyed: the default becomes current again.
    sovaMemPool_t dflt = nullptr, current = nullptr;
    REQUIRE(sovaDeviceGetDefaultMemPool(&dflt, 0) == cudaSuccess);
    REQUIRE(sovaDeviceSetMemPool(0, pool) == cudaSuccess);
    REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
    CHECK(current == pool);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
    CHECK(current == dflt);
    CHECK(sovaDeviceSetMemPool(0, pool) == cudaErrorInvalidValue);
    REQUIRE(sovaDeviceGetMemPool(&current, 0) == cudaSuccess);
    CHECK(current == dflt);
    // sovaMallocAsync now serves from the default pool.
    void* p = nullptr;
    REQUIRE(sovaMallocAsync(&p, 4096, 0) == cudaSuccess);
    const std::uint64_t used = attr(dflt, cudaMemPoolAttrUsedMemCurrent);
    CHECK(used >= 4096);
    REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
    CHECK(attr(dflt, cudaMemPoolAttrUsedMemCurrent) == used - 4096);
  }
  SECTION("graph memory attributes and trims: bad attribute, value, device") {
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    std::uint64_t v = 0;
    CHECK(sovaDeviceGetGraphMemAttribute(devices, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGetGraphMemAttribute(-1, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue);
    CHECK(sovaDeviceGetGraphMemAttribute(0, static_cast<cudaGraphMemAttributeType>(999), &v) ==
          cudaErrorInvalidValue);
    CHECK(sovaDeviceSetGraphMemAttribute(devices, cudaGraphMemAttrUsedMemHigh, &v) == cudaErrorInvalidDevice);
    v = 5;
    CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v) == cudaErrorInvalidValue);
    CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
    v = 0;
    CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
    CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &v) == cudaSuccess);
    CHECK(sovaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &v) == cudaSuccess);
    CHECK(sovaMemPoolGetGraphMemAttribute(pool, cudaGraphMemAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetGraphMemAttribute(pool, static_cast<cudaGraphMemAttributeType>(999), &v) ==
          cudaErrorInvalidValue);
    CHECK(sovaDeviceGraphMemTrim(devices) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGraphMemTrim(-1) == cudaErrorInvalidDevice);
    CHECK(sovaDeviceGraphMemTrim(0) == cudaSuccess);
    CHECK(sovaMemPoolGraphMemTrim(pool) == cudaSuccess);
    CHECK(graph_attr(pool, cudaGraphMemAttrUsedMemCurrent) == 0);
    CHECK(graph_attr(pool, cudaGraphMemAttrReservedMemCurrent) == 0);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
  SECTION("sleep: an unknown mode; release of the host memory while asleep") {
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &zero) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, kMiB, pool, 0) == cudaSuccess);
    const Figures before = figures(pool);
    CHECK(sovaMemPoolSleep(pool, static_cast<sovaSleepMode>(3), 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSleep(pool, static_cast<sovaSleepMode>(-1), 0) == cudaErrorInvalidValue);
    int asleep = 7;
    REQUIRE(sovaMemPoolIsAsleep(pool, &asleep) == cudaSuccess);
    CHECK(asleep == 0);
    CHECK(figures(pool) == before);
    REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, 0) == cudaSuccess);
    CHECK(sovaMemPoolReleaseSleepHostMemory(pool) == cudaErrorNotPermitted);
    REQUIRE(sovaMemPoolWake(pool, 0) == cudaSuccess);
    CHECK(sovaMemPoolReleaseSleepHostMemory(pool) == cudaSuccess);
    CHECK(stats(pool).sleepHostBytes == 0);
    REQUIRE(sovaFreeAsync(p, 0) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
}

TEST_CASE("scenario: bad calls under stream capture leave the capture valid and the pool as it was",
          "[scenario][bad-args][capture]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  Stream s(0);
  Counters wrong(1);
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  void* eager = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&eager, 2 * kMiB, pool, s) == cudaSuccess);
  fill(0, eager, 2 * kMiB, 0xEA, s);
  s.sync();
  const Figures before = figures(pool);
  const std::size_t total = device_total(0);
  void* const poison = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});

  for (cudaStreamCaptureMode mode :
       {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
    CAPTURE(static_cast<int>(mode));
    REQUIRE(cudaStreamBeginCapture(s, mode) == cudaSuccess);
    // A free of a block allocated before the capture: refused, nothing changes.
    CHECK(sovaFreeAsync(eager, s) == cudaErrorStreamCaptureUnsupported);
    // Out of memory: cudaErrorMemoryAllocation, the capture valid.
    void* p = poison;
    CHECK(sovaMallocFromPoolAsync(&p, total + 1, pool, s) == cudaErrorMemoryAllocation);
    CHECK(p == nullptr);
    // NULL out, foreign free: the usual codes under capture too.
    CHECK(sovaMallocFromPoolAsync(nullptr, 64, pool, s) == cudaErrorInvalidValue);
    int on_stack = 0;
    CHECK(sovaFreeAsync(&on_stack, s) == cudaErrorInvalidValue);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
    CHECK(status == cudaStreamCaptureStatusActive);
    // The capture goes on: a block allocated, written, checked, freed in it.
    void* g = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&g, kMiB + 3, pool, s) == cudaSuccess);
    fill(0, g, kMiB + 3, 0x6, s);
    count_wrong(0, g, kMiB + 3, 0x6, wrong.slot(0), s);
    count_wrong(0, eager, 2 * kMiB, 0xEA, wrong.slot(0), s);
    REQUIRE(sovaFreeAsync(g, s) == cudaSuccess);
    CHECK(sovaFreeAsync(g, s) == cudaErrorInvalidValue);  // a double free in the graph
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    REQUIRE(graph != nullptr);
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    for (int i = 0; i < 5; ++i) REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    s.sync();
    CHECK(wrong.read(0) == 0);
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  SECTION("an allocation on an invalidated capture: cudaErrorStreamCaptureInvalidated") {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    // A synchronous call on the capturing stream invalidates the capture.
    CHECK(cudaStreamSynchronize(s) != cudaSuccess);
    cudaGetLastError();
    void* p = poison;
    CHECK(sovaMallocFromPoolAsync(&p, kMiB, pool, s) == cudaErrorStreamCaptureInvalidated);
    CHECK(p == nullptr);
    p = poison;
    CHECK(sovaMallocAsync(&p, kMiB, s) == cudaErrorStreamCaptureInvalidated);
    CHECK(p == nullptr);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();
  }
  SECTION("a capture that allocates from an asleep pool fails with cudaErrorNotPermitted") {
    void* held = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&held, kMiB, pool, s) == cudaSuccess);
    fill(0, held, kMiB, 0x5E, s);
    REQUIRE(sovaMemPoolSleep(pool, sovaSleepBackup, s) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* p = poison;
    CHECK(sovaMallocFromPoolAsync(&p, kMiB, pool, s) == cudaErrorNotPermitted);
    CHECK(p == nullptr);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    INFO("docs/sleep-wake.md: 'A graph capture that allocates from an asleep pool fails' (the capture or the call?)");
    CHECK((end == cudaSuccess || end == cudaErrorStreamCaptureInvalidated));
    REQUIRE(sovaMemPoolWake(pool, s) == cudaSuccess);
    count_wrong(0, held, kMiB, 0x5E, wrong.slot(0), s);
    REQUIRE(sovaFreeAsync(held, s) == cudaSuccess);
    s.sync();
    CHECK(wrong.read(0) == 0);
  }
  s.sync();
  // The graphs' blocks come back once their release callbacks have run, which
  // CUDA does on its own thread after the destroys (docs/graphs.md, "When
  // memory comes back"): a read after that sees them.
  Figures after = figures(pool);
  for (int i = 0; i < 1000 && (after.used != before.used || after.live != before.live); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = figures(pool);
  }
  CHECK(after.used == before.used);
  CHECK(after.live == before.live);
  count_wrong(0, eager, 2 * kMiB, 0xEA, wrong.slot(0), s);
  s.sync();
  CHECK(wrong.read(0) == 0);
  CHECK(sovaFreeAsync(eager, s) == cudaSuccess);
  s.sync();
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

// Docs disagree on this one: docs/c-api.md says "An invalid stream handle is the
// driver's error (cudaErrorInvalidResourceHandle) and allocates nothing" and
// ("Stream checks in the C API") that allocating on a destroyed stream's handle
// returns it, while README and the same page's "Streams" call invalid or destroyed
// handles undefined behaviour. Hidden (may crash the process): run with
// `sova_gpu_tests "[scenario-ub]"`.
TEST_CASE("scenario: allocating on a destroyed stream's handle (with stream checks)",
          "[.][scenario-ub][!mayfail]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  cudaStream_t dead = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&dead, cudaStreamNonBlocking) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, kMiB, pool, dead) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, dead) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(dead) == cudaSuccess);
  const Figures before = figures(pool);
  void* q = reinterpret_cast<void*>(std::uintptr_t{0xdeadbeef});
  CHECK(sovaMallocFromPoolAsync(&q, kMiB, pool, dead) == cudaErrorInvalidResourceHandle);
  CHECK(q == nullptr);
  CHECK(figures(pool) == before);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
