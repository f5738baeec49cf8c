// The LD_PRELOAD test on the GPU (run_preload_test.py --nvcc builds it twice:
// nvcc -cudart shared, routed to sova; nvcc -cudart static, nvcc's default,
// which cannot be routed and is run to see the preload say so). A program
// that knows nothing of sova: blocks from cudaMallocAsync and from a
// cudaMemPoolCreate pool on two streams, a kernel writing each, the host
// checking every byte, then frees; then memory that is not sova's (cudaMalloc,
// an exportable pool, which the preload leaves to the runtime) through the
// same calls.
//   preload_gpu expect-sova     asserts the pools are sova's (tagged handles)
//   preload_gpu expect-runtime  asserts they are the runtime's
// Exit status 0 only if the data and the expectation hold.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

__global__ void fill(unsigned* p, std::size_t n, unsigned tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = tag ^ i;
}

#define CHECK_CUDA(call) \
  do { \
    cudaError_t e_ = (call); \
    if (e_ != cudaSuccess) { \
      std::printf("FAILED: %s: %s\n", #call, cudaGetErrorName(e_)); \
      return 1; \
    } \
  } while (0)

int main(int argc, char** argv) {
  const bool expect_sova = argc == 2 && std::strcmp(argv[1], "expect-sova") == 0;
  if (argc != 2 || (!expect_sova && std::strcmp(argv[1], "expect-runtime") != 0)) {
    std::fprintf(stderr, "usage: %s expect-sova|expect-runtime\n", argv[0]);
    return 2;
  }
  cudaStream_t s[2];
  for (auto& st : s) CHECK_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaMemPool_t def = nullptr, pool = nullptr;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&def, 0));
  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CHECK_CUDA(cudaMemPoolCreate(&pool, &props));
  auto tagged = [](cudaMemPool_t h) { return (reinterpret_cast<std::uintptr_t>(h) & 0xF) == 0b0101; };
  std::printf("default pool %p, created pool %p\n", static_cast<void*>(def), static_cast<void*>(pool));
  if (tagged(def) != expect_sova || tagged(pool) != expect_sova) {
    std::printf("FAILED: the pools are %s's, expected %s's\n", tagged(def) ? "sova" : "the runtime",
                expect_sova ? "sova" : "the runtime");
    return 1;
  }
  const std::size_t sizes[] = {4096, 1 << 20, 3 << 20, 40 << 20};
  int bad = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<unsigned*> blocks;
    std::vector<std::size_t> counts;
    std::vector<int> streams;
    for (std::size_t i = 0; i < 8; ++i) {
      const std::size_t bytes = sizes[i % 4];
      unsigned* p = nullptr;
      const int k = static_cast<int>(i % 2);
      if (i % 3 == 0) {
        CHECK_CUDA(cudaMallocFromPoolAsync(&p, bytes, pool, s[k]));
      } else {
        CHECK_CUDA(cudaMallocAsync(&p, bytes, s[k]));
      }
      fill<<<64, 256, 0, s[k]>>>(p, bytes / 4, 0x5eed0000u + static_cast<unsigned>(i));
      blocks.push_back(p);
      counts.push_back(bytes / 4);
      streams.push_back(k);
    }
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      std::vector<unsigned> host(counts[i]);
      CHECK_CUDA(cudaMemcpyAsync(host.data(), blocks[i], counts[i] * 4, cudaMemcpyDeviceToHost, s[streams[i]]));
      CHECK_CUDA(cudaStreamSynchronize(s[streams[i]]));
      for (std::size_t j = 0; j < counts[i]; ++j) {
        if (host[j] != ((0x5eed0000u + static_cast<unsigned>(i)) ^ static_cast<unsigned>(j))) {
          ++bad;
          break;
        }
      }
      CHECK_CUDA(cudaFreeAsync(blocks[i], s[(streams[i] + round) % 2]));  // some frees on the other stream
    }
  }
  // Memory that is not sova's stays freeable where the runtime allows it:
  // cudaMalloc memory through cudaFreeAsync, and a pool sova does not serve
  // (exportable as a POSIX file descriptor) with every call, made current too.
  void* m = nullptr;
  CHECK_CUDA(cudaMalloc(&m, 1 << 20));
  CHECK_CUDA(cudaFreeAsync(m, s[0]));
  cudaMemPoolProps ipc_props = props;
  ipc_props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  cudaMemPool_t ipc = nullptr;
  const cudaError_t ipc_err = cudaMemPoolCreate(&ipc, &ipc_props);
  if (ipc_err == cudaErrorNotSupported) {
    std::printf("exportable pools not supported here: that part not checked\n");
  } else {
    CHECK_CUDA(ipc_err);
    if (tagged(ipc)) {
      std::printf("FAILED: an exportable pool must stay the runtime's\n");
      return 1;
    }
    auto ipc_used = [&]() {
      std::uint64_t v = ~0ull;
      return cudaMemPoolGetAttribute(ipc, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess ? v : ~0ull;
    };
    void* r1 = nullptr;
    void* r2 = nullptr;
    CHECK_CUDA(cudaMallocFromPoolAsync(&r1, 1 << 20, ipc, s[0]));
    CHECK_CUDA(cudaDeviceSetMemPool(0, ipc));
    cudaMemPool_t current = nullptr;
    CHECK_CUDA(cudaDeviceGetMemPool(&current, 0));
    CHECK_CUDA(cudaMallocAsync(&r2, 4096, s[0]));  // from the current pool: the runtime's
    const std::uint64_t in_ipc = ipc_used();
    CHECK_CUDA(cudaDeviceSetMemPool(0, def));
    CHECK_CUDA(cudaFreeAsync(r1, s[0]));
    CHECK_CUDA(cudaFreeAsync(r2, s[0]));
    CHECK_CUDA(cudaStreamSynchronize(s[0]));
    if (current != ipc || in_ipc != (1u << 20) + 4096 || ipc_used() != 0) {
      std::printf(
          "FAILED: the runtime's pool as current: current %p (want %p), used %llu (want %llu), after frees %llu\n",
          static_cast<void*>(current), static_cast<void*>(ipc), static_cast<unsigned long long>(in_ipc),
          static_cast<unsigned long long>((1u << 20) + 4096), static_cast<unsigned long long>(ipc_used()));
      return 1;
    }
    CHECK_CUDA(cudaMemPoolDestroy(ipc));
    std::printf("cudaMalloc memory and the runtime's exportable pool: ok\n");
  }

  std::uint64_t used = 1;
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  CHECK_CUDA(cudaMemPoolDestroy(pool));
  for (auto st : s) CHECK_CUDA(cudaStreamDestroy(st));
  std::printf("%d blocks with wrong data, pool used at the end %llu\n", bad, static_cast<unsigned long long>(used));
  return bad == 0 && used == 0 ? 0 : 1;
}
