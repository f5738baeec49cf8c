// Probe: what the CUDA runtime's stream-ordered allocator returns in edge cases.
// sova's C API mirrors these codes; docs/runtime-errors.md records the H100's output.
// Usage: probe_runtime_errors CASE   (each case runs in its own process: some
// misuse may poison the context, so one case must not affect the next).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <string>

static void show(const char* what, cudaError_t e) {
  std::printf("%-58s -> %s (%d)\n", what, cudaGetErrorName(e), (int)e);
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string c = argv[1];
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaMemPool_t def;
  cudaDeviceGetDefaultMemPool(&def, 0);
  void* p = (void*)0x1234;
  if (c == "size0") {
    cudaError_t e = cudaMallocAsync(&p, 0, s);
    show("cudaMallocAsync(&p, 0, s)", e);
    std::printf("  p after = %p\n", p);
    show("  cudaFreeAsync(p from size 0)", cudaFreeAsync(p, s));
  } else if (c == "nullout") {
    show("cudaMallocAsync(nullptr, 16, s)", cudaMallocAsync(nullptr, 16, s));
  } else if (c == "huge") {
    cudaError_t e = cudaMallocAsync(&p, (size_t)1 << 50, s);
    show("cudaMallocAsync(&p, 1<<50, s)", e);
    std::printf("  p after = %p\n", p);
    show("  cudaGetLastError after", cudaGetLastError());
    void* q = nullptr;
    show("  next cudaMallocAsync(&q, 256, s)", cudaMallocAsync(&q, 256, s));
  } else if (c == "overfree") {
    size_t fr, tot;
    cudaMemGetInfo(&fr, &tot);
    cudaError_t e = cudaMallocAsync(&p, tot + (1 << 20), s);
    show("cudaMallocAsync(&p, total+1MiB, s)", e);
    std::printf("  p after = %p\n", p);
    show("  cudaGetLastError after", cudaGetLastError());
  } else if (c == "freenull") {
    show("cudaFreeAsync(nullptr, s)", cudaFreeAsync(nullptr, s));
  } else if (c == "freehost") {
    static int x;
    show("cudaFreeAsync(&host_static, s)", cudaFreeAsync(&x, s));
    show("  cudaStreamSynchronize after", cudaStreamSynchronize(s));
  } else if (c == "freemalloc") {
    void* q;
    cudaMalloc(&q, 1 << 20);
    show("cudaFreeAsync(cudaMalloc'd ptr, s)", cudaFreeAsync(q, s));
    show("  cudaStreamSynchronize after", cudaStreamSynchronize(s));
  } else if (c == "interior") {
    cudaMallocAsync(&p, 4096, s);
    show("cudaFreeAsync(p+256, s)", cudaFreeAsync((char*)p + 256, s));
    show("  cudaStreamSynchronize after", cudaStreamSynchronize(s));
    show("  cudaFreeAsync(p, s) proper", cudaFreeAsync(p, s));
  } else if (c == "doublefree") {
    cudaMallocAsync(&p, 4096, s);
    show("cudaFreeAsync(p, s) first", cudaFreeAsync(p, s));
    show("cudaFreeAsync(p, s) second", cudaFreeAsync(p, s));
    show("  cudaStreamSynchronize after", cudaStreamSynchronize(s));
  } else if (c == "doublefree_sync") {
    cudaMallocAsync(&p, 4096, s);
    cudaFreeAsync(p, s);
    cudaStreamSynchronize(s);
    show("cudaFreeAsync(p, s) second after sync", cudaFreeAsync(p, s));
    show("  cudaStreamSynchronize after", cudaStreamSynchronize(s));
  } else if (c == "badstream") {
    show("cudaMallocAsync(&p,16,(cudaStream_t)0xdead0)", cudaMallocAsync(&p, 16, (cudaStream_t)0xdead0));
  } else if (c == "destroyedstream") {
    cudaStream_t t;
    cudaStreamCreate(&t);
    cudaStreamDestroy(t);
    show("cudaMallocAsync(&p,16,destroyed stream)", cudaMallocAsync(&p, 16, t));
  } else if (c == "attrs") {
    uint64_t v = 0;
    cudaMallocAsync(&p, 1, s);
    cudaStreamSynchronize(s);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &v);
    std::printf("  used after 1-byte alloc = %llu\n", (unsigned long long)v);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v);
    std::printf("  reserved after 1-byte alloc = %llu\n", (unsigned long long)v);
    void* q;
    cudaMallocAsync(&q, 3000, s);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &v);
    std::printf("  used after +3000-byte alloc = %llu\n", (unsigned long long)v);
    std::printf("  ptr alignment: p=%p q=%p\n", p, q);
    cudaFreeAsync(p, s);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrUsedMemCurrent, &v);
    std::printf("  used right after freeing 1-byte block (no sync) = %llu\n", (unsigned long long)v);
    cudaStreamSynchronize(s);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v);
    std::printf("  reserved after sync (threshold 0, q live) = %llu\n", (unsigned long long)v);
    cudaFreeAsync(q, s);
    cudaStreamSynchronize(s);
    cudaMemPoolGetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v);
    std::printf("  reserved after freeing all + sync = %llu\n", (unsigned long long)v);
    v = 5;
    show("SetAttribute(UsedMemHigh, 5)", cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &v));
    v = 0;
    show("SetAttribute(UsedMemHigh, 0)", cudaMemPoolSetAttribute(def, cudaMemPoolAttrUsedMemHigh, &v));
    show("SetAttribute(ReservedMemCurrent, 0)", cudaMemPoolSetAttribute(def, cudaMemPoolAttrReservedMemCurrent, &v));
    show("SetAttribute((cudaMemPoolAttr)999, 0)", cudaMemPoolSetAttribute(def, (cudaMemPoolAttr)999, &v));
    show("GetAttribute((cudaMemPoolAttr)999)", cudaMemPoolGetAttribute(def, (cudaMemPoolAttr)999, &v));
    show("GetAttribute(ReleaseThreshold, nullptr)",
         cudaMemPoolGetAttribute(def, cudaMemPoolAttrReleaseThreshold, nullptr));
    int iv = 7;
    show("SetAttribute(ReuseAllowOpportunistic, 7)",
         cudaMemPoolSetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &iv));
    cudaMemPoolGetAttribute(def, cudaMemPoolReuseAllowOpportunistic, &iv);
    std::printf("  reads back as %d\n", iv);
    show("MemPoolTrimTo(def, 0)", cudaMemPoolTrimTo(def, 0));
    show("MemPoolTrimTo(nullptr, 0)", cudaMemPoolTrimTo(nullptr, 0));
  } else if (c == "pools") {
    cudaMemPool_t q;
    show("cudaDeviceGetDefaultMemPool(&q, 99)", cudaDeviceGetDefaultMemPool(&q, 99));
    show("cudaDeviceGetDefaultMemPool(&q, -1)", cudaDeviceGetDefaultMemPool(&q, -1));
    show("cudaDeviceGetDefaultMemPool(nullptr, 0)", cudaDeviceGetDefaultMemPool(nullptr, 0));
    show("cudaDeviceGetMemPool(&q, 99)", cudaDeviceGetMemPool(&q, 99));
    show("cudaDeviceSetMemPool(0, nullptr)", cudaDeviceSetMemPool(0, nullptr));
    show("cudaDeviceSetMemPool(99, def)", cudaDeviceSetMemPool(99, def));
    cudaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    show("cudaMemPoolCreate(&q, zeroed props)", cudaMemPoolCreate(&q, &props));
    show("cudaMemPoolCreate(&q, nullptr)", cudaMemPoolCreate(&q, nullptr));
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 99;
    show("cudaMemPoolCreate(&q, device 99)", cudaMemPoolCreate(&q, &props));
    props.location.id = 0;
    props.maxSize = 64 << 20;
    show("cudaMemPoolCreate(&q, maxSize 64MiB)", cudaMemPoolCreate(&q, &props));
    show("  alloc 32MiB from it", cudaMallocFromPoolAsync(&p, 32 << 20, q, s));
    void* r;
    show("  alloc 48MiB more from it", cudaMallocFromPoolAsync(&r, 48 << 20, q, s));
    show("  alloc 65MiB from it", cudaMallocFromPoolAsync(&r, 65 << 20, q, s));
    show("  cudaMemPoolDestroy with live block", cudaMemPoolDestroy(q));
    show("  cudaFreeAsync(p) after pool destroy", cudaFreeAsync(p, s));
    show("  cudaStreamSynchronize", cudaStreamSynchronize(s));
    show("cudaMemPoolDestroy(def)", cudaMemPoolDestroy(def));
    show("cudaMemPoolDestroy(nullptr)", cudaMemPoolDestroy(nullptr));
    show("cudaMallocFromPoolAsync(&p, 16, nullptr, s)", cudaMallocFromPoolAsync(&p, 16, nullptr, s));
    cudaMemAccessDesc d;
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = 0;
    d.flags = cudaMemAccessFlagsProtNone;
    show("cudaMemPoolSetAccess(def, own device ProtNone)", cudaMemPoolSetAccess(def, &d, 1));
    d.location.id = 99;
    d.flags = cudaMemAccessFlagsProtReadWrite;
    show("cudaMemPoolSetAccess(def, device 99)", cudaMemPoolSetAccess(def, &d, 1));
    show("cudaMemPoolSetAccess(def, nullptr, 0)", cudaMemPoolSetAccess(def, nullptr, 0));
    cudaMemAccessFlags f;
    cudaMemLocation loc;
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 0;
    show("cudaMemPoolGetAccess(&f, def, dev0)", cudaMemPoolGetAccess(&f, def, &loc));
    std::printf("  flags = %d\n", (int)f);
    loc.id = 99;
    show("cudaMemPoolGetAccess(&f, def, dev99)", cudaMemPoolGetAccess(&f, def, &loc));
  } else if (c == "destroyedpool") {
    cudaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    cudaMemPool_t q;
    cudaMemPoolCreate(&q, &props);
    cudaMemPoolDestroy(q);
    show("cudaMallocFromPoolAsync(destroyed pool)", cudaMallocFromPoolAsync(&p, 16, q, s));
  } else if (c == "capture") {
    cudaStream_t t;
    cudaStreamCreate(&t);
    cudaStreamBeginCapture(t, cudaStreamCaptureModeGlobal);
    show("cudaMallocAsync under capture", cudaMallocAsync(&p, 1 << 20, t));
    show("cudaFreeAsync under capture", cudaFreeAsync(p, t));
    cudaGraph_t g;
    show("EndCapture", cudaStreamEndCapture(t, &g));
  } else {
    return 2;
  }
  return 0;
}
