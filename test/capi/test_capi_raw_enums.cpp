// Enum arguments that C callers may fill with any
// int (cudaMemPoolAttr, cudaMemAccessFlags, cudaMemLocationType) are read as
// raw integers and refused with cudaErrorInvalidValue, changing nothing.
// Before the fix, access flags were never validated (an empty pool stored
// flags 2 or 5, reported them, and every later allocation failed), and the
// attribute and access paths loaded out-of-range enum values, which
// UndefinedBehaviorSanitizer reports (the ASan + UBSan run, with
// -fno-sanitize-recover, fails on it). The calls are made from C (raw_enums.c).
#include "capi/capi_test_util.hpp"
#include "capi/raw_enums.h"

#include <climits>

using namespace sova::capi_test;

namespace {

/// The pool works: a block can be allocated, written in stream order and freed.
void check_pool_works(sovaMemPool_t pool) {
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 3 * MiB, pool, s) == cudaSuccess);
  fill_on(s, p, 3 * MiB, 7);
  s.synchronize();
  CHECK(holds(p, 3 * MiB, 7));
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
}

}  // namespace

TEST_CASE("capi: access flags that are none of the enum's are refused on an empty pool", "[capi][issue17]") {
  ScopedPool pool;  // nothing mapped yet: the driver never sees the flags
  for (const int flags : {2, 5, 4, -1, INT_MAX}) {
    INFO("flags " << flags);
    CHECK(raw_set_access(pool, cudaMemLocationTypeDevice, 1, flags) == cudaErrorInvalidValue);
    int now = -1;
    CHECK(raw_get_access(&now, pool, cudaMemLocationTypeDevice, 1) == cudaSuccess);
    CHECK(now == cudaMemAccessFlagsProtNone);  // unchanged
  }
  check_pool_works(pool);
  // Valid flags still work, and read back.
  CHECK(raw_set_access(pool, cudaMemLocationTypeDevice, 1, cudaMemAccessFlagsProtRead) == cudaSuccess);
  int now = -1;
  CHECK(raw_get_access(&now, pool, cudaMemLocationTypeDevice, 1) == cudaSuccess);
  CHECK(now == cudaMemAccessFlagsProtRead);
  check_pool_works(pool);
}

TEST_CASE("capi: access flags that are none of the enum's are refused with memory mapped", "[capi][issue17]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, MiB, pool, s) == cudaSuccess);
  for (const int flags : {2, 5}) {
    CHECK(raw_set_access(pool, cudaMemLocationTypeDevice, 1, flags) == cudaErrorInvalidValue);
    int now = -1;
    CHECK(raw_get_access(&now, pool, cudaMemLocationTypeDevice, 1) == cudaSuccess);
    CHECK(now == cudaMemAccessFlagsProtNone);
  }
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  check_pool_works(pool);
}

TEST_CASE("capi: location types that are not a device are refused", "[capi][issue17]") {
  ScopedPool pool;
  for (const int type : {0, 2, 99, -7}) {
    INFO("location type " << type);
    CHECK(raw_set_access(pool, type, 1, cudaMemAccessFlagsProtReadWrite) == cudaErrorInvalidValue);
    int now = -1;
    CHECK(raw_get_access(&now, pool, type, 0) == cudaErrorInvalidValue);
  }
  check_pool_works(pool);
}

TEST_CASE("capi: attributes that are none of the enum's are refused, changing nothing", "[capi][issue17]") {
  ScopedPool pool;
  const std::uint64_t threshold = attr(pool, cudaMemPoolAttrReleaseThreshold);
  for (const int which : {0, 9, 100, -1, INT_MAX, INT_MIN}) {
    INFO("attribute " << which);
    std::uint64_t value = 12345;
    CHECK(raw_set_attribute(pool, which, &value) == cudaErrorInvalidValue);
    CHECK(raw_get_attribute(pool, which, &value) == cudaErrorInvalidValue);
    CHECK(value == 12345);
  }
  CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == threshold);
  // Known attributes still go through the same raw path.
  std::uint64_t keep = 64 * MiB;
  CHECK(raw_set_attribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  CHECK(attr(pool, cudaMemPoolAttrReleaseThreshold) == 64 * MiB);
  check_pool_works(pool);
}
