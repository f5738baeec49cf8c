// Probe: what physical remapping can rely on (docs/policies.md, "Physical remapping").
//   1. cuMemUnmap of a sub-range of one mapping: allowed or refused?
//   2. cuMemMap of part of a handle (a non-zero offset): allowed or refused?
//      (Both refused on the H100: a chunk moves whole.)
//   3. a whole chunk (2 MiB, 32 MiB) unmapped and mapped at another VA: its
//      bytes kept, and the host cost against creating it.
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_check.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main() {
  cudaFree(nullptr);  // context
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t chunk = 16 * g;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  CUdeviceptr va = 0, other = 0;
  CHECK(cuMemAddressReserve(&va, 4 * chunk, 0, 0, 0));
  CHECK(cuMemAddressReserve(&other, 4 * chunk, 0, 0, 0));

  // 1. Sub-range unmap of a whole-handle mapping.
  CUmemGenericAllocationHandle h;
  CHECK(cuMemCreate(&h, chunk, &prop, 0));
  CHECK(cuMemMap(va, chunk, 0, h, 0));
  CUresult sub = cuMemUnmap(va, g);
  const char* name = nullptr;
  cuGetErrorName(sub, &name);
  std::printf("1. unmap first granule of a 16-granule mapping: %s\n", name);
  if (sub == CUDA_SUCCESS) {
    cuMemUnmap(va + g, chunk - g);
  } else {
    CHECK(cuMemUnmap(va, chunk));
  }

  // 2. A mapping at an offset into the handle (granule 1 of 16).
  CUresult offset_map = cuMemMap(va, g, g, h, 0);
  cuGetErrorName(offset_map, &name);
  std::printf("2. map one granule at offset 2 MiB into a 32 MiB handle: %s\n", name);
  if (offset_map == CUDA_SUCCESS) CHECK(cuMemUnmap(va, g));

  // 3. Whole chunks moved to another VA: bytes kept, and the host cost of
  //    unmap + map + set-access (remapping) against create + map + access.
  for (const size_t bytes : {g, chunk}) {
    const int reps = 20;
    double t_move = 0, t_create = 0;
    bool kept = true;
    for (int rep = 0; rep < reps; ++rep) {
      CUmemGenericAllocationHandle m;
      double t0 = now_us();
      CHECK(cuMemCreate(&m, bytes, &prop, 0));
      CHECK(cuMemMap(va, bytes, 0, m, 0));
      CHECK(cuMemSetAccess(va, bytes, &access, 1));
      double t1 = now_us();
      t_create += t1 - t0;
      if (cudaMemset(reinterpret_cast<void*>(va), (rep + 7) & 0xff, bytes) != cudaSuccess) return 1;
      cudaDeviceSynchronize();
      double t2 = now_us();
      CHECK(cuMemUnmap(va, bytes));
      CHECK(cuMemMap(other, bytes, 0, m, 0));
      CHECK(cuMemSetAccess(other, bytes, &access, 1));
      double t3 = now_us();
      t_move += t3 - t2;
      std::vector<unsigned char> host(bytes);
      cudaMemcpy(host.data(), reinterpret_cast<void*>(other), bytes, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < bytes; i += 4096) kept = kept && host[i] == ((rep + 7) & 0xff);
      CHECK(cuMemUnmap(other, bytes));
      CHECK(cuMemRelease(m));
    }
    std::printf(
        "3. %zu MiB chunk moved to another VA keeps its bytes: %s; mean of %d: "
        "create+map+access %.1f us, unmap+map+access (move) %.1f us\n",
        bytes >> 20, kept ? "yes" : "NO", reps, t_create / reps, t_move / reps);
  }
  CHECK(cuMemRelease(h));
  CHECK(cuMemAddressFree(va, 4 * chunk));
  CHECK(cuMemAddressFree(other, 4 * chunk));
  return 0;
}
