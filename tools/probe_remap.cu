// Probe: what physical remapping can rely on (docs/notes, issue 5).
//   1. cuMemUnmap of a sub-range of one mapping: allowed or refused?
//   2. one 32 MiB handle mapped as sixteen 2 MiB mappings (cuMemMap offset
//      k * 2 MiB), one cuMemSetAccess over all of them;
//   3. one of those granules unmapped and mapped at another VA: its bytes kept;
//   4. host cost of each step, and of the plain one-mapping path, for comparison.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call)                                                              \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) {                                                    \
      const char* s_ = nullptr;                                                  \
      cuGetErrorName(r_, &s_);                                                   \
      std::printf("FAILED %s: %s (line %d)\n", #call, s_ ? s_ : "?", __LINE__);  \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

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

  // 2. Sixteen granule mappings of one handle, one set-access over them.
  const int reps = 20;
  double t_map16 = 0, t_access16 = 0, t_map1 = 0, t_access1 = 0, t_unmap_g = 0, t_remap_g = 0,
         t_unmap16 = 0, t_unmap1 = 0;
  bool kept = true;
  for (int rep = 0; rep < reps; ++rep) {
    double t0 = now_us();
    for (size_t k = 0; k < 16; ++k) CHECK(cuMemMap(va + k * g, g, k * g, h, 0));
    double t1 = now_us();
    CHECK(cuMemSetAccess(va, chunk, &access, 1));
    double t2 = now_us();
    t_map16 += t1 - t0;
    t_access16 += t2 - t1;
    // Write a pattern: granule k holds byte k + rep.
    for (size_t k = 0; k < 16; ++k) {
      if (cudaMemset(reinterpret_cast<void*>(va + k * g), int(k + rep) & 0xff, g) != cudaSuccess) {
        std::printf("memset failed\n");
        return 1;
      }
    }
    cudaDeviceSynchronize();
    // 3. Move granule 5 to `other`.
    double t3 = now_us();
    CHECK(cuMemUnmap(va + 5 * g, g));
    double t4 = now_us();
    CHECK(cuMemMap(other + 7 * g, g, 5 * g, h, 0));
    CHECK(cuMemSetAccess(other + 7 * g, g, &access, 1));
    double t5 = now_us();
    t_unmap_g += t4 - t3;
    t_remap_g += t5 - t4;
    std::vector<unsigned char> host(g);
    cudaMemcpy(host.data(), reinterpret_cast<void*>(other + 7 * g), g, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < g; i += 4096) kept = kept && host[i] == ((5 + rep) & 0xff);
    double t6 = now_us();
    CHECK(cuMemUnmap(other + 7 * g, g));
    for (size_t k = 0; k < 16; ++k) {
      if (k != 5) CHECK(cuMemUnmap(va + k * g, g));
    }
    double t7 = now_us();
    t_unmap16 += t7 - t6;
    // Plain: one mapping of the whole handle.
    double t8 = now_us();
    CHECK(cuMemMap(va, chunk, 0, h, 0));
    double t9 = now_us();
    CHECK(cuMemSetAccess(va, chunk, &access, 1));
    double t10 = now_us();
    CHECK(cuMemUnmap(va, chunk));
    double t11 = now_us();
    t_map1 += t9 - t8;
    t_access1 += t10 - t9;
    t_unmap1 += t11 - t10;
  }
  std::printf("2. 16 granule mappings of one 32 MiB handle + one set-access over them: OK\n");
  std::printf("3. a granule moved to another VA keeps its bytes: %s\n", kept ? "yes" : "NO");
  std::printf("4. host cost, mean of %d (us): map 16 granules %.1f, set-access over them %.1f, "
              "unmap all 16 %.1f\n", reps, t_map16 / reps, t_access16 / reps, t_unmap16 / reps);
  std::printf("   move one granule: unmap %.1f, map + set-access %.1f\n", t_unmap_g / reps, t_remap_g / reps);
  std::printf("   one mapping of the handle: map %.1f, set-access %.1f, unmap %.1f\n", t_map1 / reps,
              t_access1 / reps, t_unmap1 / reps);
  CHECK(cuMemRelease(h));
  CHECK(cuMemAddressFree(va, 4 * chunk));
  CHECK(cuMemAddressFree(other, 4 * chunk));
  return 0;
}
