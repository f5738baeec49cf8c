// A C API pool's statistics, read for a test: the whole struct of this
// build's size, the call required to succeed (a failure ends the test case).
#pragma once

#include "support/catch.hpp"

#include <sova/sova.h>

#include <cstring>

namespace sova::test {

inline sovaMemPoolStats stats_of(sovaMemPool_t pool) {
  sovaMemPoolStats s;
  std::memset(&s, 0, sizeof s);
  s.structSize = sizeof s;
  REQUIRE(sovaMemPoolGetStats(pool, &s) == cudaSuccess);
  return s;
}

}  // namespace sova::test
