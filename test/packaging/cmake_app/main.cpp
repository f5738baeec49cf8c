// An outside C++ program using sova through CMake's find_package(sova)
// (check_packaging.sh). The C++ API on a SimDriver and the C API's typed
// overloads on the process's (SOVA_DRIVER=sim): no GPU needed.
#include <sova/pool.hpp>
#include <sova/sim.hpp>
#include <sova/sova.h>

#include <cstdio>

int main() {
  sova::SimDriver sim;
  sova::PoolOptions options;
  options.driver = &sim;
  sova::Pool pool(options);
  void* p = pool.allocate(1 << 20, nullptr);
  if (pool.stats().used_current != (1u << 20)) return 1;
  pool.deallocate(p, nullptr);

  float* f = nullptr;  // the typed overload, as cudaMallocAsync(&f, ...) has
  if (sovaMallocAsync(&f, 256 * sizeof(float), nullptr) != cudaSuccess || f == nullptr) return 2;
  if (sovaFreeAsync(f, nullptr) != cudaSuccess) return 3;
  std::puts("cmake_app: ok");
  return 0;
}
