// A program that knows nothing of sova: it calls the CUDA runtime's
// stream-ordered allocator by its own names. Built twice (test/preload/
// meson.build): against libcudart.so, where LD_PRELOAD=libsova_preload.so
// must route every call to sova, and against cudart_static, where it cannot
// (run_preload_test.py checks the load-time message).
//
//   preload_probe routed   asserts that each call reached sova (run with the
//                          preload and SOVA_DRIVER=sim: no GPU needed, and
//                          without a GPU the runtime itself would fail every
//                          call, so success is itself evidence of routing)
//   preload_probe plain    does one cudaMallocAsync and prints its code
// Prints one line per check; exit status 0 only if all passed.
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

int g_failed = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  if (!ok) ++g_failed;
}

std::uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr which) {
  std::uint64_t v = ~std::uint64_t{0};
  if (cudaMemPoolGetAttribute(pool, which, &v) != cudaSuccess) return ~std::uint64_t{0};
  return v;
}

bool sova_handle(cudaMemPool_t pool) { return (reinterpret_cast<std::uintptr_t>(pool) & 0xF) == 0b0101; }

int routed() {
  // The names resolve to the preload's definitions, not the runtime's.
  void* runtime = dlopen("libcudart.so." CUDA_MAJOR_STRING, RTLD_NOW | RTLD_NOLOAD);
  check(runtime != nullptr, "libcudart.so is loaded (the program links it)");
  if (runtime == nullptr) return 1;
  void* ours = dlsym(RTLD_DEFAULT, "cudaMallocAsync");
  void* theirs = dlsym(runtime, "cudaMallocAsync");
  check(ours != nullptr && ours != theirs, "cudaMallocAsync resolves before libcudart's (interposed)");
  check(dlsym(RTLD_DEFAULT, "sovaMallocAsync") != nullptr, "the preload is loaded");

  cudaMemPool_t def = nullptr;
  check(cudaDeviceGetDefaultMemPool(&def, 0) == cudaSuccess && sova_handle(def),
        "cudaDeviceGetDefaultMemPool gives a sova handle");
  const std::uint64_t def_used = attr(def, cudaMemPoolAttrUsedMemCurrent);

  void* p = nullptr;
  check(cudaMallocAsync(&p, 1 << 20, 0) == cudaSuccess && p != nullptr, "cudaMallocAsync from the default pool");
  check(attr(def, cudaMemPoolAttrUsedMemCurrent) == def_used + (1 << 20), "the default pool counts it");
  float* f = nullptr;  // the runtime's C++ template overload, inlined into this program
  check(cudaMallocAsync(&f, 256 * sizeof(float), cudaStreamPerThread) == cudaSuccess,
        "typed cudaMallocAsync on the per-thread stream");

  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props) == cudaSuccess && sova_handle(pool), "cudaMemPoolCreate makes a sova pool");
  void* q = nullptr;
  check(cudaMallocFromPoolAsync(&q, 4096, pool, 0) == cudaSuccess, "cudaMallocFromPoolAsync with that handle");
  check(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 4096, "its attributes through cudaMemPoolGetAttribute");
  std::uint64_t keep = 64 << 20;
  check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess &&
            attr(pool, cudaMemPoolAttrReleaseThreshold) == keep,
        "cudaMemPoolSetAttribute");
  check(cudaMemPoolTrimTo(pool, 0) == cudaSuccess, "cudaMemPoolTrimTo");
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 0;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  check(cudaMemPoolGetAccess(&flags, pool, &loc) == cudaSuccess && flags == cudaMemAccessFlagsProtReadWrite,
        "cudaMemPoolGetAccess: the owning device reads and writes");

  check(cudaDeviceSetMemPool(0, pool) == cudaSuccess, "cudaDeviceSetMemPool to it");
  cudaMemPool_t current = nullptr;
  check(cudaDeviceGetMemPool(&current, 0) == cudaSuccess && current == pool, "cudaDeviceGetMemPool gives it back");
  void* r = nullptr;
  check(cudaMallocAsync(&r, 8192, 0) == cudaSuccess && attr(pool, cudaMemPoolAttrUsedMemCurrent) == 4096 + 8192,
        "cudaMallocAsync now allocates from it");
  check(cudaDeviceSetMemPool(0, def) == cudaSuccess, "cudaDeviceSetMemPool back to the default");

  check(cudaFreeAsync(p, 0) == cudaSuccess, "cudaFreeAsync of the default pool's block");
  check(cudaFreeAsync(f, cudaStreamPerThread) == cudaSuccess, "cudaFreeAsync of the typed block");
  check(cudaFreeAsync(q, 0) == cudaSuccess && cudaFreeAsync(r, 0) == cudaSuccess, "cudaFreeAsync of the pool's blocks");
  check(attr(pool, cudaMemPoolAttrUsedMemCurrent) == 0, "the pool's used memory is back to 0");
  check(cudaFreeAsync(q, 0) == cudaErrorInvalidValue, "a double free of sova memory: sova's cudaErrorInvalidValue");

  // Not sova's: forwarded. The runtime's answer, whatever it is here (no
  // GPU: no driver), is what the program gets.
  int host = 0;
  using FreeFn = cudaError_t (*)(void*, cudaStream_t);
  auto real_free = reinterpret_cast<FreeFn>(dlsym(runtime, "cudaFreeAsync"));
  const cudaError_t expected = real_free(&host, 0);
  check(cudaFreeAsync(&host, 0) == expected, "a pointer sova did not allocate goes to the runtime");

  check(cudaMemPoolDestroy(pool) == cudaSuccess, "cudaMemPoolDestroy");
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue,
        "the destroyed handle is refused by sova (not passed to the runtime)");
  check(cudaMemPoolDestroy(def) == cudaErrorInvalidValue, "the default pool cannot be destroyed");
  std::printf("%d failed\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}

int plain() {
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, 1 << 20, 0);
  std::printf("cudaMallocAsync: %d\n", static_cast<int>(err));
  if (err == cudaSuccess) cudaFreeAsync(p, 0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "routed") == 0) return routed();
  if (argc == 2 && std::strcmp(argv[1], "plain") == 0) return plain();
  std::fprintf(stderr, "usage: %s routed|plain\n", argv[0]);
  return 2;
}
