// Scenario probe for LD_PRELOAD=libsova_preload.so, written from the
// documentation only (docs/c-api.md, "LD_PRELOAD (`libsova_preload.so`)" and
// "The allocation log"; README, "An unmodified program: `LD_PRELOAD`").
//
// A program that calls the CUDA runtime's names, linked with libcudart.so
// like preload_probe.cpp, run by run_preload_scenarios.py with the preload
// and SOVA_DRIVER=sim (the documented test-only switch: "the runtime itself
// then fails every call it gets, so a success is sova's"). Each mode is one
// scenario; each check prints "ok: ..." or "FAILED: ..." quoting what the
// docs promise; the exit status is 0 only if every check passed.
//
// Only the runtime's names are called, except where a scenario needs what a
// runtime program cannot reach without a GPU:
//   * extra streams: cudaStreamCreate is not routed (the runtime fails it
//     here), so more streams come from the simulation the preload carries,
//     found with dlsym (sova::process_driver, sova::SimDriver::create_stream:
//     the preload "carries its own copy of sova and exports sova's API too");
//   * sova's own C API (sovaMemPoolGetStats, sovaLogStart/Stop,
//     sovaGetLastErrorMessage), found with dlsym for the same reason.
#include <sova/driver.hpp>  // the Driver interface (virtual calls only: nothing to link)
#include <sova/sova.h>        // sovaMemPoolStats (the functions are found with dlsym)

#include <cuda_runtime.h>

#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

// The per-thread-default-stream spellings nvcc emits under
// --default-stream per-thread; libcudart.so defines them (and the preload
// routes them: "cudaMallocAsync(_ptsz)", "cudaFreeAsync(_ptsz)").
extern "C" cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
extern "C" cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);

namespace {

int g_failed = 0;
std::atomic<int> g_thread_failed{0};

void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failed;
}

std::string code(cudaError_t e) { return std::to_string(static_cast<int>(e)); }

long tid() { return static_cast<long>(syscall(SYS_gettid)); }

bool sova_handle(cudaMemPool_t pool) { return (reinterpret_cast<std::uintptr_t>(pool) & 0xF) == 0b0101; }

std::uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr which) {
  std::uint64_t v = ~std::uint64_t{0};
  if (cudaMemPoolGetAttribute(pool, which, &v) != cudaSuccess) return ~std::uint64_t{0};
  return v;
}

// ---- sova's own API, exported by the preload --------------------------------

template <class F>
F sova_fn(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  if (f == nullptr) {
    std::printf("FAILED: the preload exports %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(f);
}

const char* last_message() { return sova_fn<const char* (*)()>("sovaGetLastErrorMessage")(); }

// The runtime's own definition of a name (what the preload forwards to).
template <class F>
F runtime_fn(const char* name) {
  void* rt = dlopen("libcudart.so." CUDA_MAJOR_STRING, RTLD_NOW | RTLD_NOLOAD);
  void* f = rt ? dlsym(rt, name) : nullptr;
  if (f == nullptr) {
    std::printf("FAILED: libcudart.so defines %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(f);
}

// Streams of the simulation (see the header comment).
cudaStream_t sim_stream() {
  using DriverFn = sova::Driver& (*)();
  using CreateFn = cudaStream_t (*)(void*, bool, int);  // SimDriver::create_stream(this, blocking, device)
  auto driver = sova_fn<DriverFn>("_ZN4sova14process_driverEv");
  auto create = sova_fn<CreateFn>("_ZN4sova9SimDriver13create_streamEbi");
  return create(&driver(), false, 0);
}

sova::Driver& sim_driver() { return sova_fn<sova::Driver& (*)()>("_ZN4sova14process_driverEv")(); }

// ---- a tag in every live block (simulation pointers are host memory) --------

void fill(void* p, std::size_t size, std::uint8_t tag) {
  std::memset(p, tag, size < 64 ? size : 64);
  if (size > 64) std::memset(static_cast<char*>(p) + size - 64, tag, 64);
}
bool intact(const void* p, std::size_t size, std::uint8_t tag) {
  const auto* b = static_cast<const std::uint8_t*>(p);
  const std::size_t head = size < 64 ? size : 64;
  for (std::size_t i = 0; i < head; ++i)
    if (b[i] != tag) return false;
  if (size > 64)
    for (std::size_t i = size - 64; i < size; ++i)
      if (b[i] != tag) return false;
  return true;
}

struct Block {
  void* p;
  std::size_t size;
  cudaStream_t stream;
  std::uint8_t tag;
};

// ---- scenario: random sequences on several streams --------------------------
//
// docs/c-api.md, "Allocation": pointers aligned to 512 bytes;
// cudaMemPoolAttrUsedMemCurrent "counts the requested bytes ... and drops at
// the free, before the stream reaches it". A block may be freed on any stream.
int random_ops(unsigned seed) {
  cudaMemPool_t def = nullptr;
  check(cudaDeviceGetDefaultMemPool(&def, 0) == cudaSuccess && sova_handle(def),
        "cudaDeviceGetDefaultMemPool: \"sova's default / current pool\"");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t made = nullptr;
  check(cudaMemPoolCreate(&made, &props) == cudaSuccess && sova_handle(made),
        "cudaMemPoolCreate: \"sova for pinned device memory with no export handle types\"");

  std::vector<cudaStream_t> streams = {nullptr, cudaStreamLegacy, cudaStreamPerThread, sim_stream(), sim_stream()};
  std::mt19937_64 rng(seed);
  std::vector<Block> live[2];  // [0]: default pool, [1]: the created pool
  std::uint64_t used[2] = {attr(def, cudaMemPoolAttrUsedMemCurrent), 0};
  const std::uint64_t used0 = used[0];
  int bad_align = 0, bad_tag = 0, bad_used = 0, bad_code = 0, allocs = 0, frees = 0;
  std::uint64_t pool_allocs[2] = {0, 0}, pool_frees[2] = {0, 0};
  auto get_stats = sova_fn<cudaError_t (*)(sovaMemPool_t, sovaMemPoolStats*)>("sovaMemPoolGetStats");
  sovaMemPoolStats st0{};
  st0.structSize = sizeof st0;
  check(get_stats(reinterpret_cast<sovaMemPool_t>(def), &st0) == cudaSuccess,
        "sovaMemPoolGetStats takes the handle cudaDeviceGetDefaultMemPool gave (\"a sova handle is the "
        "sovaMemPool_t value itself\")");
  std::uint8_t next_tag = 1;
  for (int step = 0; step < 20000; ++step) {
    const int which = static_cast<int>(rng() % 2);
    const cudaMemPool_t pool = which == 0 ? def : made;
    auto& blocks = live[which];
    const bool allocate = blocks.empty() || (blocks.size() < 200 && rng() % 100 < 55);
    const cudaStream_t s = streams[rng() % streams.size()];
    const bool ptsz = rng() % 4 == 0;
    if (allocate) {
      std::size_t size;
      switch (rng() % 4) {
        case 0: size = 1 + rng() % 512; break;
        case 1: size = 1 + rng() % (64 << 10); break;
        case 2: size = (1 + rng() % 64) << 12; break;
        default: size = 1 + rng() % (4 << 20); break;
      }
      void* p = nullptr;
      cudaError_t e;
      if (which == 0)
        e = ptsz ? cudaMallocAsync_ptsz(&p, size, s) : cudaMallocAsync(&p, size, s);
      else
        e = cudaMallocFromPoolAsync(&p, size, pool, s);
      if (e != cudaSuccess || p == nullptr) {
        ++bad_code;
        continue;
      }
      ++allocs;
      ++pool_allocs[which];
      if (reinterpret_cast<std::uintptr_t>(p) % 512 != 0) ++bad_align;
      const std::uint8_t tag = next_tag++;
      if (next_tag == 0) next_tag = 1;
      fill(p, size, tag);
      blocks.push_back({p, size, s, tag});
      used[which] += size;
    } else {
      const std::size_t i = rng() % blocks.size();
      const Block b = blocks[i];
      blocks[i] = blocks.back();
      blocks.pop_back();
      if (!intact(b.p, b.size, b.tag)) ++bad_tag;
      const cudaError_t e = ptsz ? cudaFreeAsync_ptsz(b.p, s) : cudaFreeAsync(b.p, s);
      if (e != cudaSuccess) ++bad_code;
      ++frees;
      ++pool_frees[which];
      used[which] -= b.size;
    }
    if (step % 97 == 0) {
      if (attr(def, cudaMemPoolAttrUsedMemCurrent) != used[0]) ++bad_used;
      if (attr(made, cudaMemPoolAttrUsedMemCurrent) != used[1]) ++bad_used;
    }
  }
  std::printf("random: %d allocations, %d frees\n", allocs, frees);
  check(bad_code == 0, "every cudaMallocAsync/cudaMallocFromPoolAsync/cudaFreeAsync(_ptsz) of the sequence "
                       "returned cudaSuccess on 5 streams (" + std::to_string(bad_code) + " did not)");
  check(bad_align == 0, "\"Pointers are aligned to 512 bytes\" (" + std::to_string(bad_align) + " were not)");
  check(bad_tag == 0, "every live block kept its contents until its free (" + std::to_string(bad_tag) + " did not)");
  check(bad_used == 0, "cudaMemPoolAttrUsedMemCurrent \"counts the requested bytes\" and \"drops at the free\" (" +
                           std::to_string(bad_used) + " samples differed)");
  sovaMemPoolStats st[2]{};
  for (int w = 0; w < 2; ++w) {
    st[w].structSize = sizeof st[w];
    get_stats(reinterpret_cast<sovaMemPool_t>(w == 0 ? def : made), &st[w]);
  }
  check(st[1].allocations == pool_allocs[1] && st[1].deallocations == pool_frees[1] &&
            st[1].liveBlocks == live[1].size() && st[1].usedCurrent == used[1],
        "sovaMemPoolGetStats of the created pool: allocations " + std::to_string(pool_allocs[1]) + ", deallocations " +
            std::to_string(pool_frees[1]) + ", liveBlocks " + std::to_string(live[1].size()) + " (got " +
            std::to_string(st[1].allocations) + ", " + std::to_string(st[1].deallocations) + ", " +
            std::to_string(st[1].liveBlocks) + ")");
  check(st[0].allocations - st0.allocations == pool_allocs[0] && st[0].deallocations - st0.deallocations == pool_frees[0] &&
            st[0].usedCurrent == used[0],
        "sovaMemPoolGetStats of the default pool counts this sequence's allocations and frees");
  for (int w = 0; w < 2; ++w)
    for (const Block& b : live[w]) {
      if (!intact(b.p, b.size, b.tag)) ++bad_tag;
      if (cudaFreeAsync(b.p, b.stream) != cudaSuccess) ++bad_code;
    }
  check(bad_code == 0 && bad_tag == 0, "the remaining blocks freed, contents intact");
  check(attr(def, cudaMemPoolAttrUsedMemCurrent) == used0 && attr(made, cudaMemPoolAttrUsedMemCurrent) == 0,
        "UsedMemCurrent back where it started on both pools");
  check(cudaMemPoolTrimTo(made, 0) == cudaSuccess && attr(made, cudaMemPoolAttrReservedMemCurrent) == 0,
        "cudaMemPoolTrimTo(pool, 0) with no live block: \"memory beyond keep that no live block uses is "
        "released now\" (ReservedMemCurrent " + std::to_string(attr(made, cudaMemPoolAttrReservedMemCurrent)) + ")");
  check(cudaMemPoolDestroy(made) == cudaSuccess, "cudaMemPoolDestroy");
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: what the runtime would reject, sizes, handles -----------------
int errors() {
  cudaMemPool_t def = nullptr;
  check(cudaDeviceGetDefaultMemPool(&def, 0) == cudaSuccess, "cudaDeviceGetDefaultMemPool");
  void* p = reinterpret_cast<void*>(0x1);

  // docs/c-api.md, "Allocation".
  check(cudaMallocAsync(nullptr, 16, 0) == cudaErrorInvalidValue, "\"devPtr == NULL: cudaErrorInvalidValue\"");
  p = reinterpret_cast<void*>(0x1);
  check(cudaMallocAsync(&p, 0, 0) == cudaSuccess && p == nullptr, "\"size == 0: cudaSuccess, *devPtr = NULL\"");
  check(cudaFreeAsync(nullptr, 0) == cudaSuccess, "\"freeing that NULL is cudaSuccess\"");

  void* a = nullptr;
  check(cudaMallocAsync(&a, 10000, 0) == cudaSuccess && a != nullptr, "a 10000-byte block");
  fill(a, 10000, 0xA5);
  const std::uint64_t used = attr(def, cudaMemPoolAttrUsedMemCurrent);
  const std::uint64_t reserved = attr(def, cudaMemPoolAttrReservedMemCurrent);
  for (std::size_t huge : {std::size_t{1} << 40, std::size_t{1} << 50, SIZE_MAX, SIZE_MAX - 511}) {
    p = reinterpret_cast<void*>(0x1);
    const cudaError_t e = cudaMallocAsync(&p, huge, 0);
    check(e == cudaErrorMemoryAllocation && p == nullptr,
          "cudaMallocAsync(" + std::to_string(huge) + " bytes): \"Out of memory ... cudaErrorMemoryAllocation, "
          "*devPtr = NULL\" (got " + code(e) + ")");
  }
  check(attr(def, cudaMemPoolAttrUsedMemCurrent) == used && attr(def, cudaMemPoolAttrReservedMemCurrent) == reserved,
        "out of memory: \"the pool unchanged\"");
  void* b = nullptr;
  check(cudaMallocAsync(&b, 4096, 0) == cudaSuccess && b != nullptr,
        "out of memory: \"the next allocation works as before\"");

  // Frees the runtime would reject. docs/c-api.md, LD_PRELOAD: "double and
  // interior frees get sova's cudaErrorInvalidValue".
  cudaError_t e = cudaFreeAsync(static_cast<char*>(a) + 512, 0);
  check(e == cudaErrorInvalidValue, "an interior pointer: \"cudaErrorInvalidValue\" (got " + code(e) + ")");
  check(std::strstr(last_message(), "inside a block allocated at") != nullptr,
        std::string("its message says \"inside a block allocated at\" (got \"") + last_message() + "\")");
  check(intact(a, 10000, 0xA5) && attr(def, cudaMemPoolAttrUsedMemCurrent) == used + 4096,
        "after the interior free \"nothing changes: the block stays live, its contents intact, the pool's "
        "statistics as they were\"");
  check(cudaFreeAsync(a, 0) == cudaSuccess, "the block's own start frees it");
  e = cudaFreeAsync(a, 0);
  check(e == cudaErrorInvalidValue, "a double free: sova's \"cudaErrorInvalidValue\" (got " + code(e) + ")");
  check(std::strstr(last_message(), "already freed") != nullptr,
        std::string("its message says \"already freed\" (got \"") + last_message() + "\")");
  e = cudaFreeAsync(a, cudaStreamPerThread);
  check(e == cudaErrorInvalidValue, "a double free on another stream: cudaErrorInvalidValue (got " + code(e) + ")");
  check(attr(def, cudaMemPoolAttrUsedMemCurrent) == used - 10000 + 4096,
        "the refused double frees left UsedMemCurrent as it was");

  // A pointer that lies in no sova pool goes to the runtime, and the program
  // gets the runtime's answer.
  int host = 0;
  auto real_free = runtime_fn<cudaError_t (*)(void*, cudaStream_t)>("cudaFreeAsync");
  const cudaError_t expected = real_free(&host, 0);
  e = cudaFreeAsync(&host, 0);
  check(e == expected, "a pointer never allocated by sova \"else the runtime\": the runtime's " + code(expected) +
                           " (got " + code(e) + ")");
  void* heap = std::malloc(4096);
  e = cudaFreeAsync(heap, 0);
  check(e == expected, "a malloc pointer: the runtime's answer too (got " + code(e) + ")");
  std::free(heap);

  // cudaMalloc is not in the routing table: the runtime's (which fails here).
  auto real_malloc = runtime_fn<cudaError_t (*)(void**, size_t)>("cudaMalloc");
  void* m = nullptr;
  const cudaError_t rt_malloc = real_malloc(&m, 4096);
  m = nullptr;
  e = cudaMalloc(&m, 4096);
  check(e == rt_malloc && e != cudaSuccess,
        "cudaMalloc is not routed (\"memory that is not sova's (cudaMalloc ...) goes to the runtime\"): the "
        "runtime's " + code(rt_malloc) + " (got " + code(e) + ")");

  // cudaFree of a sova pointer: docs/c-api.md's routing table, "sova for a pointer
  // in a sova pool, as the runtime frees cudaMallocAsync memory ... (double and
  // interior frees: sova's cudaErrorInvalidValue); else the runtime".
  {
    const std::uint64_t used_before = attr(def, cudaMemPoolAttrUsedMemCurrent);
    void* f = nullptr;
    check(cudaMallocAsync(&f, 3000, 0) == cudaSuccess, "cudaMallocAsync for cudaFree");
    check(cudaFree(static_cast<char*>(f) + 512) == cudaErrorInvalidValue,
          "cudaFree of an interior pointer of a sova block: cudaErrorInvalidValue");
    check(cudaFree(f) == cudaSuccess, "cudaFree of a cudaMallocAsync pointer: cudaSuccess, as the runtime");
    check(attr(def, cudaMemPoolAttrUsedMemCurrent) == used_before, "cudaFree gave the block back to the pool");
    check(cudaFree(f) == cudaErrorInvalidValue, "a second cudaFree: sova's cudaErrorInvalidValue (double free)");
    check(cudaFreeAsync(f, 0) == cudaErrorInvalidValue, "cudaFreeAsync after cudaFree: a double free");
    auto real_cuda_free = runtime_fn<cudaError_t (*)(void*)>("cudaFree");
    int on_stack = 0;
    const cudaError_t rt_free = real_cuda_free(&on_stack);
    check(cudaFree(&on_stack) == rt_free, "cudaFree of a pointer that is not sova's: the runtime's " + code(rt_free));
  }

  // Pools: handles, attributes, access (docs/c-api.md, "Pools").
  check(cudaMemPoolDestroy(def) == cudaErrorInvalidValue, "destroying the default pool: cudaErrorInvalidValue");
  cudaMemPool_t garbage = reinterpret_cast<cudaMemPool_t>(std::uintptr_t{0xdead0005});  // low bits 0101: sova-shaped
  std::uint64_t v = 0;
  check(cudaMemPoolGetAttribute(garbage, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue,
        "a garbage sova-shaped handle: \"validated, never dereferenced\", cudaErrorInvalidValue");
  check(cudaMemPoolTrimTo(garbage, 0) == cudaErrorInvalidValue, "cudaMemPoolTrimTo(garbage): cudaErrorInvalidValue");
  void* g = reinterpret_cast<void*>(0x1);
  check(cudaMallocFromPoolAsync(&g, 16, garbage, 0) == cudaErrorInvalidValue && g == nullptr,
        "cudaMallocFromPoolAsync(garbage): cudaErrorInvalidValue, *devPtr = NULL");
  check(cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, nullptr) == cudaErrorInvalidValue,
        "a NULL value: cudaErrorInvalidValue");
  check(cudaMemPoolGetAttribute(def, static_cast<cudaMemPoolAttr>(0x7777), &v) == cudaErrorInvalidValue,
        "an unknown attribute: cudaErrorInvalidValue");
  v = 5;
  check(cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue,
        "UsedMemCurrent is read-only: cudaErrorInvalidValue when set");
  check(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemHigh, &v) == cudaErrorInvalidValue,
        "ReservedMemHigh accepts only 0: 5 is cudaErrorInvalidValue");
  v = 0;
  check(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemHigh, &v) == cudaSuccess &&
            attr(def, cudaMemPoolAttrReservedMemHigh) == attr(def, cudaMemPoolAttrReservedMemCurrent),
        "ReservedMemHigh set to 0: \"reset to the current value\"");
  int on = 7;
  check(cudaMemPoolSetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &on) == cudaSuccess, "a Reuse switch set to 7");
  int back = 0;
  check(cudaMemPoolGetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &back) == cudaSuccess && back == 1,
        "\"any non-zero value reads back as 1\" (got " + std::to_string(back) + ")");
  std::uint64_t thr = 3 << 20;
  check(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &thr) == cudaSuccess &&
            attr(def, cudaMemPoolAttrReleaseThreshold) == thr,
        "ReleaseThreshold is read-write");
  check(cudaMemPoolSetAccess(def, nullptr, 0) == cudaSuccess, "SetAccess(pool, NULL, 0) is cudaSuccess");
  check(cudaMemPoolSetAccess(def, nullptr, 1) == cudaErrorInvalidValue, "SetAccess(pool, NULL, n > 0): cudaErrorInvalidValue");
  cudaMemAccessDesc far{};
  far.location.type = cudaMemLocationTypeDevice;
  far.location.id = 5;
  far.flags = cudaMemAccessFlagsProtReadWrite;
  check(cudaMemPoolSetAccess(def, &far, 1) == cudaErrorInvalidDevice,
        "\"a descriptor for a device out of range ... is cudaErrorInvalidDevice\"");
  cudaMemLocation loc{};
  loc.type = cudaMemLocationTypeDevice;
  loc.id = 5;
  cudaMemAccessFlags flags{};
  check(cudaMemPoolGetAccess(&flags, def, &loc) == cudaErrorInvalidValue, "GetAccess for a device out of range: cudaErrorInvalidValue");

  // Devices (docs/c-api.md, "Devices"): routed to sova.
  cudaMemPool_t out = nullptr;
  check(cudaDeviceGetDefaultMemPool(&out, 5) == cudaErrorInvalidDevice, "cudaDeviceGetDefaultMemPool(device 5): cudaErrorInvalidDevice");
  check(cudaDeviceGetMemPool(&out, 5) == cudaErrorInvalidValue, "cudaDeviceGetMemPool(device 5): cudaErrorInvalidValue");
  check(cudaDeviceSetMemPool(5, def) == cudaErrorInvalidValue, "cudaDeviceSetMemPool(device 5): cudaErrorInvalidValue");
  check(cudaDeviceGetDefaultMemPool(nullptr, 0) == cudaErrorInvalidValue, "cudaDeviceGetDefaultMemPool(NULL): cudaErrorInvalidValue");

  // Pools created through the preload: maxSize kept; device out of range.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = 8 << 20;
  cudaMemPool_t small = nullptr;
  check(cudaMemPoolCreate(&small, &props) == cudaSuccess && sova_handle(small), "a sova pool with maxSize 8 MiB");
  void* s1 = nullptr;
  e = cudaMallocFromPoolAsync(&s1, 16 << 20, small, 0);
  check(e == cudaErrorMemoryAllocation && s1 == nullptr,
        "\"maxSize kept\": 16 MiB from an 8 MiB pool is cudaErrorMemoryAllocation (got " + code(e) + ")");
  check(cudaMallocFromPoolAsync(&s1, 4 << 20, small, 0) == cudaSuccess, "4 MiB from it works");
  props.location.id = 5;
  props.maxSize = 0;
  cudaMemPool_t none = nullptr;
  check(cudaMemPoolCreate(&none, &props) == cudaErrorInvalidValue, "cudaMemPoolCreate on device 5: cudaErrorInvalidValue, as the runtime");

  // Export of sova's pools and memory: "cudaErrorNotSupported for sova's pools and memory".
  int fd = -1;
  e = cudaMemPoolExportToShareableHandle(&fd, small, cudaMemHandleTypePosixFileDescriptor, 0);
  check(e == cudaErrorNotSupported, "cudaMemPoolExportToShareableHandle of a sova pool: cudaErrorNotSupported (got " + code(e) + ")");
  cudaMemPoolPtrExportData data{};
  e = cudaMemPoolExportPointer(&data, s1);
  check(e == cudaErrorNotSupported, "cudaMemPoolExportPointer of sova memory: cudaErrorNotSupported (got " + code(e) + ")");

  // A pool with export handle types is the runtime's (which fails here).
  props.location.id = 0;
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  auto real_create = runtime_fn<cudaError_t (*)(cudaMemPool_t*, const cudaMemPoolProps*)>("cudaMemPoolCreate");
  cudaMemPool_t rt_pool = nullptr;
  const cudaError_t rt_create = real_create(&rt_pool, &props);
  cudaMemPool_t ipc = nullptr;
  e = cudaMemPoolCreate(&ipc, &props);
  check(e == rt_create && !sova_handle(ipc),
        "cudaMemPoolCreate of an IPC-exportable pool: \"the runtime for the rest\" (the runtime's " + code(rt_create) +
            ", got " + code(e) + ")");

  // Destroy with a live block: "Blocks still live stay valid (their contents
  // intact)"; the handle fails at once.
  fill(s1, 4 << 20, 0x3C);
  check(cudaMemPoolDestroy(small) == cudaSuccess, "cudaMemPoolDestroy with a live block: cudaSuccess");
  check(cudaMemPoolGetAttribute(small, cudaMemPoolAttrUsedMemCurrent, &v) == cudaErrorInvalidValue,
        "the destroyed handle: cudaErrorInvalidValue (\"instead of reaching the runtime\")");
  g = reinterpret_cast<void*>(0x1);
  check(cudaMallocFromPoolAsync(&g, 16, small, 0) == cudaErrorInvalidValue && g == nullptr,
        "cudaMallocFromPoolAsync with the destroyed handle: cudaErrorInvalidValue");
  check(cudaDeviceSetMemPool(0, small) == cudaErrorInvalidValue, "cudaDeviceSetMemPool(destroyed): cudaErrorInvalidValue");
  check(intact(s1, 4 << 20, 0x3C), "the destroyed pool's live block kept its contents");
  check(cudaFreeAsync(s1, 0) == cudaSuccess, "\"A block of a destroyed pool: cudaSuccess\"");
  check(cudaFreeAsync(b, 0) == cudaSuccess, "free the last block");
  // The destroyed pool's last block is freed: "the last one releases the
  // pool". Its address then lies in no sova pool: "else the runtime".
  const cudaError_t rt_answer = real_free(s1, 0);
  e = cudaFreeAsync(s1, 0);
  check(e == rt_answer, "a double free after the destroyed pool's release: the pointer lies in no sova pool any "
                        "more, so the runtime's " + code(rt_answer) + " (got " + code(e) + ")");
  // The default pool lives as long as the process: after a trim to 0, a
  // double free still lies in it and gets sova's answer.
  check(cudaMemPoolTrimTo(def, 0) == cudaSuccess, "cudaMemPoolTrimTo(default, 0)");
  e = cudaFreeAsync(b, 0);
  check(e == cudaErrorInvalidValue, "a double free in the trimmed default pool: sova's cudaErrorInvalidValue (got " +
                                        code(e) + ")");
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: calls before the first allocation ------------------------------
// argv: which call comes first. Each leaves the process in a state where the
// default pool then works.
int first_call(const char* which) {
  int host = 0;
  if (std::strcmp(which, "free-null") == 0) {
    check(cudaFreeAsync(nullptr, 0) == cudaSuccess, "cudaFreeAsync(NULL) before any pool exists: cudaSuccess");
  } else if (std::strcmp(which, "free-foreign") == 0) {
    auto real_free = runtime_fn<cudaError_t (*)(void*, cudaStream_t)>("cudaFreeAsync");
    const cudaError_t expected = real_free(&host, 0);
    const cudaError_t e = cudaFreeAsync(&host, 0);
    check(e == expected, "cudaFreeAsync(host pointer) before any pool exists: the runtime's " + code(expected) +
                             " (got " + code(e) + ")");
  } else if (std::strcmp(which, "get-pool") == 0) {
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetMemPool(&pool, 0) == cudaSuccess && sova_handle(pool),
          "cudaDeviceGetMemPool first: sova's current pool");
    std::uint64_t v = 1;
    check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess && v == 0,
          "its UsedMemCurrent is 0 before any allocation");
  } else if (std::strcmp(which, "trim") == 0) {
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess, "cudaDeviceGetDefaultMemPool first");
    check(cudaMemPoolTrimTo(pool, 0) == cudaSuccess, "cudaMemPoolTrimTo before any allocation: cudaSuccess");
  } else if (std::strcmp(which, "oom") == 0) {
    void* p = reinterpret_cast<void*>(0x1);
    check(cudaMallocAsync(&p, std::size_t{1} << 40, 0) == cudaErrorMemoryAllocation && p == nullptr,
          "an out-of-memory allocation as the first call: cudaErrorMemoryAllocation");
  } else {
    std::fprintf(stderr, "unknown first call %s\n", which);
    return 2;
  }
  void* p = nullptr;
  check(cudaMallocAsync(&p, 1000, 0) == cudaSuccess && p != nullptr, "then cudaMallocAsync works");
  check(cudaFreeAsync(p, 0) == cudaSuccess, "and cudaFreeAsync");
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: threads ---------------------------------------------------------
// "Every function may be called from any thread at once": 8 threads allocate
// on their per-thread stream, the legacy stream and a shared sim stream, and
// free each other's blocks through a shared exchange.
int threads() {
  cudaMemPool_t def = nullptr;
  cudaDeviceGetDefaultMemPool(&def, 0);
  const std::uint64_t used0 = attr(def, cudaMemPoolAttrUsedMemCurrent);
  const cudaStream_t shared = sim_stream();
  constexpr int kThreads = 8;
  std::mutex mu;
  std::vector<Block> exchange;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<Block> mine;
      const cudaStream_t streams[] = {cudaStreamPerThread, nullptr, shared};
      for (int i = 0; i < 3000; ++i) {
        const cudaStream_t s = streams[rng() % 3];
        if (mine.size() < 32 && rng() % 2 == 0) {
          const std::size_t size = 1 + rng() % (256 << 10);
          void* p = nullptr;
          if (cudaMallocAsync(&p, size, s) != cudaSuccess || p == nullptr) {
            ++g_thread_failed;
            continue;
          }
          const std::uint8_t tag = static_cast<std::uint8_t>(1 + rng() % 255);
          fill(p, size, tag);
          mine.push_back({p, size, s, tag});
        } else if (!mine.empty()) {
          Block b = mine.back();
          mine.pop_back();
          if (rng() % 2 == 0) {  // hand it to another thread
            std::lock_guard<std::mutex> lock(mu);
            exchange.push_back(b);
            continue;
          }
          if (!intact(b.p, b.size, b.tag) || cudaFreeAsync(b.p, s) != cudaSuccess) ++g_thread_failed;
        }
        Block other{};
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!exchange.empty() && rng() % 3 == 0) {
            other = exchange.back();
            exchange.pop_back();
          }
        }
        if (other.p != nullptr &&
            (!intact(other.p, other.size, other.tag) || cudaFreeAsync(other.p, s) != cudaSuccess))
          ++g_thread_failed;
      }
      for (const Block& b : mine)
        if (!intact(b.p, b.size, b.tag) || cudaFreeAsync(b.p, cudaStreamPerThread) != cudaSuccess) ++g_thread_failed;
    });
  for (auto& t : ts) t.join();
  for (const Block& b : exchange)
    if (!intact(b.p, b.size, b.tag) || cudaFreeAsync(b.p, 0) != cudaSuccess) ++g_thread_failed;
  check(g_thread_failed == 0, "8 threads, 3 streams, blocks freed by other threads: every call cudaSuccess, every "
                              "block intact (" + std::to_string(g_thread_failed.load()) + " failures)");
  check(attr(def, cudaMemPoolAttrUsedMemCurrent) == used0, "UsedMemCurrent back to where it started");
  sim_driver().stream_synchronize(shared);
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: exit with live blocks -------------------------------------------
// docs/c-api.md, "At exit": default pools, and destroyed pools whose blocks
// were never freed, are not torn down; "The log is also stopped, and written
// out, at process exit". The harness checks the exit status and the log.
int exit_live(const char* how) {
  void* p[3] = {};
  cudaMallocAsync(&p[0], 1111, 0);
  cudaMallocAsync(&p[1], 2222, cudaStreamPerThread);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool = nullptr;
  cudaMemPoolCreate(&pool, &props);
  cudaMallocFromPoolAsync(&p[2], 3333, pool, sim_stream());
  cudaMemPoolDestroy(pool);  // destroyed, its block never freed
  const bool ok = p[0] && p[1] && p[2];
  std::printf("%s: three live blocks at exit\n", ok ? "ok" : "FAILED");
  std::fflush(stdout);
  if (std::strcmp(how, "thread") == 0) {
    std::thread([] { std::exit(0); }).join();  // exit() from another thread
  }
  if (std::strcmp(how, "return") == 0) return ok ? 0 : 1;
  std::exit(ok ? 0 : 1);
}

// ---- scenario: a known sequence, for the log ------------------------------------
// Prints, after it, one "expect:" line per row the log must hold, in order:
//   expect: TID,ACTION,POINTER,SIZE,STREAM   (POINTER as %p, STREAM as the
// handle passed). The harness compares the log field by field.
void expect_row(long t, const char* action, void* p, std::size_t size, cudaStream_t s) {
  std::printf("expect: %ld,%s,%p,%zu,%p\n", t, action, p, size, static_cast<void*>(s));
}

int log_known() {
  const long me = tid();
  const cudaStream_t other = sim_stream();
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  check(cudaMallocAsync(&a, 1000, 0) == cudaSuccess, "allocate 1000 on stream 0");
  expect_row(me, "allocate", a, 1000, nullptr);
  check(cudaMallocAsync(&b, 3 << 20, other) == cudaSuccess, "allocate 3 MiB on a second stream");
  expect_row(me, "allocate", b, 3 << 20, other);
  void* p = reinterpret_cast<void*>(0x1);
  check(cudaMallocAsync(&p, std::size_t{1} << 40, 0) == cudaErrorMemoryAllocation, "a failing 1 TiB allocation");
  std::printf("expect: %ld,allocate failure,(nil),%zu,%p\n", me, std::size_t{1} << 40, static_cast<void*>(nullptr));
  check(cudaFreeAsync(static_cast<char*>(a) + 512, 0) == cudaErrorInvalidValue, "an interior free (refused: not logged)");
  int host = 0;
  cudaFreeAsync(&host, 0);  // not sova's: the runtime's; not logged
  check(cudaFreeAsync(a, other) == cudaSuccess, "free the 1000-byte block on the second stream");
  expect_row(me, "free", a, 1000, other);
  check(cudaFreeAsync(a, other) == cudaErrorInvalidValue, "a double free (refused: not logged)");
  long t2 = 0;
  std::thread([&] {
    t2 = tid();
    check(cudaMallocAsync(&c, 77, cudaStreamPerThread) == cudaSuccess, "another thread allocates 77 bytes");
    expect_row(t2, "allocate", c, 77, cudaStreamPerThread);
    check(cudaFreeAsync(b, cudaStreamPerThread) == cudaSuccess, "and frees the 3 MiB block");
    expect_row(t2, "free", b, 3 << 20, cudaStreamPerThread);
  }).join();
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  cudaMemPool_t pool = nullptr;
  check(cudaMemPoolCreate(&pool, &props) == cudaSuccess, "a created pool (\"every sova pool\" is logged)");
  void* d = nullptr;
  check(cudaMallocFromPoolAsync(&d, 4096, pool, cudaStreamLegacy) == cudaSuccess, "4096 from it on cudaStreamLegacy");
  expect_row(me, "allocate", d, 4096, cudaStreamLegacy);
  check(cudaFreeAsync_ptsz(c, nullptr) == cudaSuccess, "cudaFreeAsync_ptsz of the 77-byte block");
  std::printf("ptsz-free: %ld,free,%p,77\n", me, c);  // stream column: see the harness
  check(cudaFreeAsync(d, 0) == cudaSuccess, "free the pool's block");
  expect_row(me, "free", d, 4096, nullptr);
  cudaMemPoolDestroy(pool);
  std::printf("%d failed\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: sovaLogStart / sovaLogStop through the preload --------------------
// argv: a good path, a second good path.
int log_api(const char* path, const char* path2) {
  using StartFn = cudaError_t (*)(const char*);
  using StopFn = cudaError_t (*)();
  auto start = sova_fn<StartFn>("sovaLogStart");
  auto stop = sova_fn<StopFn>("sovaLogStop");
  check(stop() == cudaSuccess, "sovaLogStop with no log running: \"cudaSuccess and nothing done\"");
  check(start(nullptr) == cudaErrorInvalidValue, "sovaLogStart(NULL): cudaErrorInvalidValue");
  check(start("") == cudaErrorInvalidValue, "sovaLogStart(\"\"): cudaErrorInvalidValue");
  const char* bad = "/nonexistent-sova-dir/x/log.csv";
  check(start(bad) == cudaErrorInvalidValue && access(bad, F_OK) != 0,
        "sovaLogStart of a file that cannot be opened: cudaErrorInvalidValue, \"no file is created\"");
  // Root (as on the test machines) opens any file for writing, so the files
  // that cannot be opened are a path under a regular file (ENOTDIR) and a
  // directory (EISDIR), for root too.
  check(start("/proc/self/exe/log.csv") == cudaErrorInvalidValue,
        "sovaLogStart of a path under a regular file: \"a file that cannot be opened for writing: "
        "cudaErrorInvalidValue\"");
  check(start("/tmp") == cudaErrorInvalidValue,
        "sovaLogStart of a directory: \"a file that cannot be opened for writing: cudaErrorInvalidValue\"");
  void* before = nullptr;
  cudaMallocAsync(&before, 111, 0);  // not logged: no log running yet
  check(start(path) == cudaSuccess, "sovaLogStart(path)");
  check(start(path2) == cudaErrorInvalidValue && access(path2, F_OK) != 0,
        "a second sovaLogStart while one runs: cudaErrorInvalidValue, \"the running log goes on; no file is created\"");
  void* p = nullptr;
  cudaMallocAsync(&p, 222, 0);
  cudaFreeAsync(p, 0);
  cudaFreeAsync(before, 0);  // allocated before the log; its free is logged
  check(stop() == cudaSuccess, "sovaLogStop: \"writes what is buffered and closes the file\"");
  cudaMallocAsync(&p, 333, 0);  // after the stop: "later calls log nothing"
  cudaFreeAsync(p, 0);
  check(stop() == cudaSuccess, "a second sovaLogStop: cudaSuccess");
  // A write error (disk full): /dev/full opens for writing and every write fails.
  check(start("/dev/full") == cudaSuccess, "sovaLogStart(\"/dev/full\") opens");
  for (int i = 0; i < 20000; ++i) {
    cudaMallocAsync(&p, 64, 0);
    cudaFreeAsync(p, 0);
  }
  const cudaError_t e = stop();
  check(e == cudaErrorUnknown, "sovaLogStop after writes failed (disk full): \"cudaErrorUnknown, after closing\" (got " +
                                   code(e) + ")");
  check(start(path2) == cudaSuccess, "a new log starts after that (the failed one was closed)");
  cudaMallocAsync(&p, 444, 0);
  cudaFreeAsync(p, 0);
  check(stop() == cudaSuccess, "and stops");
  std::printf("%d failed\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}

// SOVA_LOG is running (the harness sets it; the first pool starts it); the
// program's own sovaLogStart is refused, and sovaLogStop stops SOVA_LOG's.
int log_start_after_env(const char* path) {
  auto start = sova_fn<cudaError_t (*)(const char*)>("sovaLogStart");
  auto stop = sova_fn<cudaError_t (*)()>("sovaLogStop");
  void* p = nullptr;
  cudaMallocAsync(&p, 555, 0);
  cudaFreeAsync(p, 0);
  check(start(path) == cudaErrorInvalidValue && access(path, F_OK) != 0,
        "sovaLogStart while SOVA_LOG's log runs: \"a log already running ... cudaErrorInvalidValue, nothing "
        "changes (the running log goes on; no file is created)\"");
  cudaMallocAsync(&p, 666, 0);
  cudaFreeAsync(p, 0);
  check(stop() == cudaSuccess, "sovaLogStop stops it");
  cudaMallocAsync(&p, 777, 0);  // not logged
  cudaFreeAsync(p, 0);
  return g_failed == 0 ? 0 : 1;
}

// ---- scenario: many rows, several threads ---------------------------------------
// "every allocation and free": N pairs per thread on 4 threads, over many of
// the per-thread buffers' flushes (4096 rows each, include/sova/sova.h).
int log_many(int pairs) {
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([pairs, t] {
      std::vector<void*> held;
      for (int i = 0; i < pairs; ++i) {
        void* p = nullptr;
        if (cudaMallocAsync(&p, 256 + 64 * t + i % 7, cudaStreamPerThread) != cudaSuccess) ++g_thread_failed;
        held.push_back(p);
        if (held.size() == 16) {
          for (void* q : held)
            if (cudaFreeAsync(q, cudaStreamPerThread) != cudaSuccess) ++g_thread_failed;
          held.clear();
        }
      }
      for (void* q : held)
        if (cudaFreeAsync(q, cudaStreamPerThread) != cudaSuccess) ++g_thread_failed;
    });
  for (auto& t : ts) t.join();
  check(g_thread_failed == 0, "every call of the 4 threads succeeded");
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc >= 2 ? argv[1] : "";
  if (mode == "random" && argc == 3) return random_ops(static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)));
  if (mode == "errors") return errors();
  if (mode == "first" && argc == 3) return first_call(argv[2]);
  if (mode == "threads") return threads();
  if (mode == "exit-live" && argc == 3) return exit_live(argv[2]);
  if (mode == "log-known") return log_known();
  if (mode == "log-api" && argc == 4) return log_api(argv[2], argv[3]);
  if (mode == "log-start-after-env" && argc == 3) return log_start_after_env(argv[2]);
  if (mode == "log-many" && argc == 3) return log_many(std::atoi(argv[2]));
  if (mode == "pid") {  // a program that does nothing with CUDA
    std::printf("%ld\n", tid());
    return 0;
  }
  std::fprintf(stderr,
               "usage: %s random SEED | errors | first WHICH | threads | exit-live exit|return|thread | "
               "log-known | log-api PATH PATH2 | log-many N\n",
               argv[0]);
  return 2;
}
