// C API: sovaGetLastErrorMessage says what the last failed call on this
// thread was and why, where sova knows it; "" before any failure; per thread;
// a successful call leaves it alone.
#include "capi/capi_test_util.hpp"

#include <cstdio>
#include <string>
#include <thread>

using namespace sova::capi_test;

namespace {

std::string last() { return sovaGetLastErrorMessage(); }

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("capi last error: empty on a thread where nothing failed, never NULL", "[capi][last_error]") {
  std::string seen = "unset";
  std::thread([&] {
    const char* m = sovaGetLastErrorMessage();
    seen = m == nullptr ? "NULL" : m;
  }).join();
  CHECK(seen.empty());
}

TEST_CASE("capi last error: refused frees say what the pointer was", "[capi][last_error]") {
  ScopedPool pool;
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 10000, pool, s) == cudaSuccess);
  char* inside = static_cast<char*>(p) + 512;

  CHECK(sovaFreeAsync(inside, s) == cudaErrorInvalidValue);
  INFO(last());
  CHECK(contains(last(), "sovaFreeAsync: cannot free " + hex(inside)));
  CHECK(contains(last(), "inside a block allocated at " + hex(p) + " (10000 bytes); free its start"));
  // Within the block's first 512 bytes too (the block map's resolution).
  for (std::size_t into : {std::size_t{1}, std::size_t{256}, std::size_t{511}}) {
    char* near = static_cast<char*>(p) + into;
    CHECK(sovaFreeAsync(near, s) == cudaErrorInvalidValue);
    INFO(last());
    CHECK(contains(last(), "inside a block allocated at " + hex(p) + " (10000 bytes); free its start"));
  }

  int on_the_stack = 0;
  CHECK(sovaFreeAsync(&on_the_stack, s) == cudaErrorInvalidValue);
  CHECK(contains(last(), "cannot free " + hex(&on_the_stack) + ": not allocated by sova"));

  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(contains(last(), "not allocated by sova"));  // success leaves the last failure as it was
  CHECK(sovaFreeAsync_ptsz(p, s) == cudaErrorInvalidValue);
  CHECK(contains(last(), "sovaFreeAsync_ptsz: cannot free " + hex(p) + ": already freed"));
  CHECK(used(pool) == 0);
}

TEST_CASE("capi last error: other failures name the call and the code", "[capi][last_error]") {
  ScopedPool pool;
  ScopedStream s;
  CHECK(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, nullptr) == cudaErrorInvalidValue);
  CHECK(last() == std::string("sovaMemPoolGetAttribute: cudaErrorInvalidValue (") +
                      cudaGetErrorString(cudaErrorInvalidValue) + ")");
  // A refused pool handle says what it was (test_capi_bad_input.cpp has the cases).
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(last() == "sovaMemPoolTrimTo: pool is NULL; pass a pool from sovaMemPoolCreate, or "
                  "sovaDeviceGetDefaultMemPool's");

  void* p = reinterpret_cast<void*>(0x1);
  CHECK(sovaMallocFromPoolAsync(&p, std::size_t{1} << 40, pool, s) == cudaErrorMemoryAllocation);
  INFO(last());
  CHECK(contains(last(),
                 "sovaMallocFromPoolAsync: allocating 1099511627776 bytes failed: "
                 "cudaErrorMemoryAllocation (out of memory)"));
  CHECK(last().find("allocating") == last().rfind("allocating"));  // said once

  // An exception's message inside the library becomes the reason.
  sovaMemPoolProps props = props_on(7);
  sovaMemPool_t none = nullptr;
  CHECK(sovaMemPoolCreate(&none, &props) != cudaSuccess);
  CHECK(contains(last(), "sovaMemPoolCreate: "));
}

TEST_CASE("capi last error: a device out of range says how many there are", "[capi][last_error]") {
  sovaMemPoolProps props = props_on(7);
  sovaMemPool_t none = nullptr;
  CHECK(sovaMemPoolCreate(&none, &props) == cudaErrorInvalidValue);
  CHECK(last() == "sovaMemPoolCreate: device 7 does not exist (2 devices)");
  CHECK(sovaDeviceGetDefaultMemPool(&none, -1) == cudaErrorInvalidDevice);
  CHECK(last() == "sovaDeviceGetDefaultMemPool: device -1 does not exist (2 devices)");
  // A later failure of the same code with nothing to add is not given the old reason.
  CHECK(sovaDeviceGetDefaultMemPool(nullptr, 0) == cudaErrorInvalidValue);
  CHECK(last() == std::string("sovaDeviceGetDefaultMemPool: cudaErrorInvalidValue (") +
                      cudaGetErrorString(cudaErrorInvalidValue) + ")");
}

TEST_CASE("capi last error: each thread has its own", "[capi][last_error]") {
  CHECK(sovaMemPoolTrimTo(nullptr, 0) == cudaErrorInvalidValue);
  std::string other = "unset";
  std::thread([&] {
    CHECK(sovaMemPoolDestroy(nullptr) == cudaErrorInvalidValue);
    other = last();
  }).join();
  CHECK(contains(other, "sovaMemPoolDestroy: "));
  CHECK(contains(last(), "sovaMemPoolTrimTo: "));
}
