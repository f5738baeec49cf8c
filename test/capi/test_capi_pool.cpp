// C API: sovaMemPoolCreate / Destroy / Set-GetAttribute / TrimTo /
// Set-GetAccess, with the error rows of docs/runtime-errors.md.
#include "capi/capi_test_util.hpp"
#include "capi/handle_table.hpp"

using namespace sova::capi_test;

namespace {

/// Live VA reservations in the sim: one per pool that still exists.
std::size_t live_reservations() { return sim().counters().reservations; }

}  // namespace

TEST_CASE("capi: sovaMemPoolCreate validates its arguments", "[capi]") {
  sim();
  sovaMemPool_t pool = nullptr;
  const std::size_t before = live_reservations();
  sovaMemPoolProps props = props_on(0);

  SECTION("NULL output or props") {
    CHECK(sovaMemPoolCreate(nullptr, &props) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolCreate(&pool, nullptr) == cudaErrorInvalidValue);
  }
  SECTION("unknown flag bits") {
    props.flags = 0x40;  // the first bit no flag uses
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  }
  SECTION("no remapping and thorough remapping together") {
    props.flags = sovaMemPoolNoRemap | sovaMemPoolThoroughRemap;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  }
  SECTION("device out of range") {
    for (const int device : {-1, 2, 99}) {
      props.device = device;
      CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    }
  }
  SECTION("reserved bytes not zero") {
    props.reservedPad[0] = 1;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    props.reservedPad[0] = 0;
    props.reserved[sizeof props.reserved - 1] = 1;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    props.reserved[sizeof props.reserved - 1] = 0;
    props.reserved[0] = 0x80;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  }
  SECTION("unknown policy") {
    const int bad[] = {4, -1, 99};
    for (const int value : bad) {
      std::memcpy(&props.policy, &value, sizeof value);
      CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    }
  }
  SECTION("an unusable value wins over an unsupported one") {
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.device = 99;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  }
  SECTION("fabric handles (not built) and Windows handles are not supported") {
    props.handleTypes = cudaMemHandleTypeFabric;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorNotSupported);
    props.handleTypes = cudaMemHandleTypeWin32;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorNotSupported);
  }
  SECTION("unknown handle type bits, or a host node without the host-memory flag") {
    int bad = 0x40;
    std::memcpy(&props.handleTypes, &bad, sizeof bad);
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    props.handleTypes = cudaMemHandleTypeNone;
    props.hostNumaNode = 1;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
    props.flags = sovaMemPoolHostMemory;
    props.hostNumaNode = -1;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorInvalidValue);
  }
  SECTION("compression the device lacks (the sim's default)") {
    props.flags = sovaMemPoolCompressible;
    CHECK(sovaMemPoolCreate(&pool, &props) == cudaErrorNotSupported);
  }
  CHECK(pool == nullptr);
  CHECK(live_reservations() == before);
}

TEST_CASE("capi: zeroed props make a default pool on device 0; best-fit is accepted", "[capi]") {
  sim();
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  sovaMemPool_t a = nullptr;
  REQUIRE(sovaMemPoolCreate(&a, &props) == cudaSuccess);
  props.policy = sovaPolicyBestFit;
  props.device = 1;
  sovaMemPool_t b = nullptr;
  REQUIRE(sovaMemPoolCreate(&b, &props) == cudaSuccess);
  CHECK(a != b);
  CHECK(a != default_pool(0));
  CHECK(used(a) == 0);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 1000, b, s) == cudaSuccess);
  CHECK(used(b) == 1000);
  CHECK(used(a) == 0);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(a) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(b) == cudaSuccess);
}

TEST_CASE("capi: destroying a pool without live blocks releases it at once", "[capi]") {
  default_pool(0);  // exists before counting
  const std::size_t before = live_reservations();
  sovaMemPool_t pool = ScopedPool().release();
  CHECK(live_reservations() == before + 1);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 5000, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(live_reservations() == before);
  // The handle is dead, and so is the memory: its pointers are nobody's.
  CHECK(sovaMemPoolDestroy(pool) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  std::uint64_t value = 0;
  CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value) == cudaErrorInvalidValue);
}

TEST_CASE("capi: destroying a pool with a live block defers until that block is freed", "[capi]") {
  // The default pool holds earlier tests' free memory, which its release
  // worker may give back at any moment: given back first, so that the
  // device's physical bytes below move with this test's pool alone.
  REQUIRE(sovaMemPoolTrimTo(default_pool(0), 0) == cudaSuccess);
  const std::size_t before = live_reservations();
  const std::size_t physical_before = sim().counters().physical_bytes;
  ScopedStream s;
  sovaMemPool_t pool = ScopedPool().release();
  void* p = nullptr;
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&q, 1000, pool, s) == cudaSuccess);
  fill_on(s, p, 3 * MiB, 0x3c);
  fill_on(s, q, 1000, 0xc3);

  CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);  // the runtime returns at once too
  // The handle fails at once, everywhere.
  void* r = nullptr;
  std::uint64_t value = 0;
  CHECK(sovaMallocFromPoolAsync(&r, 16, pool, s) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &value) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolTrimTo(pool, 0) == cudaErrorInvalidValue);
  CHECK(sovaDeviceSetMemPool(0, pool) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(pool) == cudaErrorInvalidValue);
  // The memory lives on, contents intact.
  s.synchronize();
  CHECK(live_reservations() == before + 1);
  CHECK(holds(p, 3 * MiB, 0x3c));
  CHECK(holds(q, 1000, 0xc3));
  // Rejected frees do not count as the last one.
  CHECK(sovaFreeAsync(static_cast<char*>(p) + 512, s) == cudaErrorInvalidValue);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  CHECK(live_reservations() == before + 1);
  CHECK(holds(q, 1000, 0xc3));
  // The last free releases everything.
  CHECK(sovaFreeAsync(q, s) == cudaSuccess);
  CHECK(live_reservations() == before);
  CHECK(sim().counters().physical_bytes == physical_before);
  CHECK(sovaFreeAsync(q, s) == cudaErrorInvalidValue);
}

TEST_CASE("capi: default, NULL and garbage pools cannot be destroyed", "[capi]") {
  const sovaMemPool_t def = default_pool(0);
  CHECK(sovaMemPoolDestroy(def) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(default_pool(1)) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0xdeadbeef})) == cudaErrorInvalidValue);
  // Still the default pool and still working.
  CHECK(default_pool(0) == def);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 64, def, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("capi: attributes follow the runtime's rules", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 1000, pool, s) == cudaSuccess);
  std::uint64_t v = 0;

  SECTION("release threshold round-trips") {
    v = 64 * MiB;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == 64 * MiB);
  }
  SECTION("high-water marks: only 0 resets them") {
    v = 5;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaErrorInvalidValue);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 1000);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    p = nullptr;
    v = 0;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaSuccess);
    CHECK(attr(pool, cudaMemPoolAttrUsedMemHigh) == 0);
  }
  SECTION("current figures are read-only") {
    const std::uint64_t reserved_before = reserved(pool);
    v = 0;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue);
    CHECK(reserved(pool) == reserved_before);
    CHECK(used(pool) == 1000);
  }
  SECTION("unknown attributes and NULL values") {
    const auto unknown = static_cast<cudaMemPoolAttr>(999);
    CHECK(sovaMemPoolSetAttribute(pool, unknown, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetAttribute(pool, unknown, &v) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, nullptr) == cudaErrorInvalidValue);
    CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == 0);
  }
  SECTION("reuse switches read back as 0 or 1") {
    int iv = 7;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &iv) == cudaSuccess);
    iv = -1;
    CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &iv) == cudaSuccess);
    CHECK(iv == 1);
    iv = 0;
    CHECK(sovaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &iv) == cudaSuccess);
    iv = -1;
    CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &iv) == cudaSuccess);
    CHECK(iv == 0);
  }
  SECTION("NULL and garbage pools") {
    const sovaMemPool_t bad[] = {nullptr, reinterpret_cast<sovaMemPool_t>(&v)};
    for (sovaMemPool_t b : bad) {
      CHECK(sovaMemPoolSetAttribute(b, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
      CHECK(sovaMemPoolGetAttribute(b, cudaMemPoolAttrReleaseThreshold, &v) == cudaErrorInvalidValue);
    }
  }
  if (p != nullptr) CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("capi: sovaMemPoolTrimTo releases free memory, never live memory", "[capi]") {
  ScopedPool pool;
  ScopedStream s;
  std::uint64_t keep_all = UINT64_MAX;
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all) == cudaSuccess);
  void* live = nullptr;
  void* freed = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&live, 4 * MiB, pool, s) == cudaSuccess);
  REQUIRE(sovaMallocFromPoolAsync(&freed, 8 * MiB, pool, s) == cudaSuccess);
  fill_on(s, live, 4 * MiB, 0x99);
  REQUIRE(sovaFreeAsync(freed, s) == cudaSuccess);
  s.synchronize();
  CHECK(reserved(pool) >= 12 * MiB);
  CHECK(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(reserved(pool) >= 4 * MiB);
  CHECK(reserved(pool) < 12 * MiB);
  CHECK(used(pool) == 4 * MiB);
  CHECK(holds(live, 4 * MiB, 0x99));
  CHECK(sovaFreeAsync(live, s) == cudaSuccess);
  s.synchronize();
  CHECK(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  CHECK(reserved(pool) == 0);
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
}

TEST_CASE("capi: pool access follows the runtime's rules", "[capi]") {
  ScopedPool pool;
  cudaMemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtNone;
  CHECK(sovaMemPoolSetAccess(pool, &desc, 1) == cudaErrorInvalidDevice);  // own device
  desc.location.id = 99;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(sovaMemPoolSetAccess(pool, &desc, 1) == cudaErrorInvalidDevice);
  CHECK(sovaMemPoolSetAccess(pool, nullptr, 0) == cudaSuccess);
  CHECK(sovaMemPoolSetAccess(pool, nullptr, 1) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolSetAccess(nullptr, nullptr, 0) == cudaErrorInvalidValue);

  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  cudaMemLocation location;
  std::memset(&location, 0, sizeof location);
  location.type = cudaMemLocationTypeDevice;
  location.id = 0;
  CHECK(sovaMemPoolGetAccess(&flags, pool, &location) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  location.id = 99;
  CHECK(sovaMemPoolGetAccess(&flags, pool, &location) == cudaErrorInvalidValue);
  location.id = 0;
  CHECK(sovaMemPoolGetAccess(nullptr, pool, &location) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAccess(&flags, pool, nullptr) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAccess(&flags, nullptr, &location) == cudaErrorInvalidValue);

  // The pool still works after the rejected calls.
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4096, pool, s) == cudaSuccess);
  fill_on(s, p, 4096, 1);
  s.synchronize();
  CHECK(holds(p, 4096, 1));
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

TEST_CASE("capi: granting device 1 access to a device-0 pool", "[capi]") {
  ScopedPool pool;
  cudaMemAccessDesc desc;
  std::memset(&desc, 0, sizeof desc);
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 1;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK(sovaMemPoolSetAccess(pool, &desc, 1) == cudaSuccess);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  cudaMemLocation location = desc.location;
  CHECK(sovaMemPoolGetAccess(&flags, pool, &location) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
}

TEST_CASE("capi: a destroyed handle stays invalid when its slot is reused", "[capi]") {
  sovaMemPool_t a = ScopedPool().release();
  REQUIRE(sovaMemPoolDestroy(a) == cudaSuccess);
  ScopedPool b;
  const auto slot_of = [](sovaMemPool_t h) {
    using sova::capi::HandleTable;
    return (reinterpret_cast<std::uintptr_t>(h) >> HandleTable::kTagBits) & (HandleTable::kSlots - 1);
  };
  CHECK(slot_of(a) == slot_of(b.get()));  // retired slots are reused first
  CHECK(a != b.get());
  std::uint64_t value = 0;
  CHECK(sovaMemPoolGetAttribute(a, cudaMemPoolAttrUsedMemCurrent, &value) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(a) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolGetAttribute(b, cudaMemPoolAttrUsedMemCurrent, &value) == cudaSuccess);
}

TEST_CASE("capi: once a pool exists, the process driver cannot change", "[capi]") {
  default_pool(0);
  sova::SimDriver other;
  CHECK(sova::set_process_driver(&other) == cudaErrorInvalidValue);
  CHECK(&sova::process_driver() == &sim());
}

TEST_CASE("capi: stream checks catch a destroyed stream; sovaMemPoolNoStreamChecks skips them", "[capi]") {
  sova::SimDriver& driver = sim();
  cudaStream_t gone = driver.create_stream();
  driver.destroy_stream(gone);

  ScopedPool checked;
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&p, 4096, checked, gone) == cudaErrorInvalidResourceHandle);
  CHECK(p == nullptr);

  sovaMemPoolProps props = props_on(0);
  props.flags = sovaMemPoolNoStreamChecks;
  sovaMemPool_t unchecked = nullptr;
  REQUIRE(sovaMemPoolCreate(&unchecked, &props) == cudaSuccess);
  cudaStream_t s = driver.create_stream();
  void* q = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&q, 4096, unchecked, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(q, s) == cudaSuccess);
  void* again = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&again, 4096, unchecked, s) == cudaSuccess);
  CHECK(again == q);  // the fast path, as with checks
  REQUIRE(sovaFreeAsync(again, s) == cudaSuccess);
  driver.stream_synchronize(s);
  driver.destroy_stream(s);
  CHECK(sovaMemPoolDestroy(unchecked) == cudaSuccess);
}

TEST_CASE("capi: sovaMemPoolThoroughRemap backs a 32 MiB block with 8 MiB chunks", "[capi]") {
  sim();
  // A 32 MiB block is one chunk in a default pool (max_chunk 32 MiB), four in
  // a thorough one (sova::RemapEffort::thorough).
  for (const auto& [flags, chunks] : {std::pair{0u, 1u}, std::pair{unsigned{sovaMemPoolThoroughRemap}, 4u}}) {
    INFO("flags " << flags);
    sovaMemPoolProps props = props_on(0);
    props.flags = flags;
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
    ScopedStream s;
    const std::size_t creates_before = sim().counters().physical_creates;
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, std::size_t{32} << 20, pool, s) == cudaSuccess);
    CHECK(sim().counters().physical_creates - creates_before == chunks);
    CHECK(sovaFreeAsync(p, s) == cudaSuccess);
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
}

TEST_CASE("capi: each sovaPolicy places blocks its own way", "[capi]") {
  sim();
  // Two 4500-byte blocks in a fresh pool lie one block size apart: exact
  // sizes round to 4608, size classes to 5120 (the default's too, up to
  // kSmallClassLimit), buddy to 8192.
  const std::pair<sovaPolicy, std::ptrdiff_t> expected[] = {
      {sovaPolicyDefault, 5120}, {sovaPolicyBestFit, 4608}, {sovaPolicySizeClass, 5120}, {sovaPolicyBuddy, 8192}};
  for (const auto& [policy, distance] : expected) {
    INFO("policy " << static_cast<int>(policy));
    sovaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.policy = policy;
    props.flags = sovaMemPoolNoRemap;
    sovaMemPool_t pool = nullptr;
    REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
    ScopedStream s;
    void* a = nullptr;
    void* b = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&a, 4500, pool, s) == cudaSuccess);
    REQUIRE(sovaMallocFromPoolAsync(&b, 4500, pool, s) == cudaSuccess);
    CHECK(static_cast<char*>(b) - static_cast<char*>(a) == distance);
    CHECK(used(pool) == 9000);
    CHECK(sovaFreeAsync(a, s) == cudaSuccess);
    CHECK(sovaFreeAsync(b, s) == cudaSuccess);
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
  }
}
