// Prints the C API's statistics struct as the compiler lays it out, for
// check_python_stats_fields.py: a first line `sizeof N`, then `NAME OFFSET`
// for each counter of lib/capi/stats_fields.hpp's list, in its order
// (including that header also checks sovaMemPoolStats and sova::PoolStats
// against the list, at compile time).
#include "capi/stats_fields.hpp"

#include <cstdio>

int main() {
  std::printf("sizeof %zu\n", sizeof(sovaMemPoolStats));
#define SOVA_PRINT_FIELD(c_field, cpp_field) std::printf("%s %zu\n", #c_field, offsetof(sovaMemPoolStats, c_field));
  SOVA_POOL_STATS_FIELDS(SOVA_PRINT_FIELD)
#undef SOVA_PRINT_FIELD
  return 0;
}
