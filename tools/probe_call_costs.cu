// Probe: what the host-side calls on sova's C API path cost on this machine.
// Prints ns per call (best of 5 runs of 2M calls), then what the stream checks'
// two calls cost when 1, 4, 8 and 16 threads make them at once, each on its own
// stream (does the driver serialize them?). docs/benchmarks.md, "Driver costs",
// records the H100's output.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

template <class F>
double ns_per_call(F f) {
  double best = 1e30;
  for (int run = 0; run < 5; ++run) {
    const int n = 2000000;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
    if (ns < best) best = ns;
  }
  return best;
}

int main() {
  cudaFree(nullptr);
  PFN_cuCtxGetCurrent_v4000 ctx_get = nullptr;
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", reinterpret_cast<void**>(&ctx_get), 4000, cudaEnableDefault, &q);
  PFN_cuStreamGetId_v12000 get_id = nullptr;
  cudaGetDriverEntryPointByVersion("cuStreamGetId", reinterpret_cast<void**>(&get_id), 12000, cudaEnableDefault, &q);
  PFN_cuStreamIsCapturing_v10000 is_capturing = nullptr;
  cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", reinterpret_cast<void**>(&is_capturing), 10000,
                                   cudaEnableDefault, &q);
  PFN_cuStreamGetDevice_v12080 get_device = nullptr;  // sova's stream_device (CUDA 12.8 on)
  cudaGetDriverEntryPointByVersion("cuStreamGetDevice", reinterpret_cast<void**>(&get_device), 12080, cudaEnableDefault,
                                   &q);
  PFN_cuStreamGetCtx_v9020 get_ctx = nullptr;
  cudaGetDriverEntryPointByVersion("cuStreamGetCtx", reinterpret_cast<void**>(&get_ctx), 9020, cudaEnableDefault, &q);
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  volatile int sink = 0;
  std::printf("cudaGetDevice          %6.1f ns\n", ns_per_call([&] {
                int d;
                cudaGetDevice(&d);
                sink = d;
              }));
  std::printf("cuCtxGetCurrent        %6.1f ns\n", ns_per_call([&] {
                CUcontext c;
                ctx_get(&c);
                sink = c != nullptr;
              }));
  std::printf("cudaStreamIsCapturing  %6.1f ns\n", ns_per_call([&] {
                cudaStreamCaptureStatus c;
                cudaStreamIsCapturing(stream, &c);
                sink = c;
              }));
  std::printf("cuStreamIsCapturing    %6.1f ns\n", ns_per_call([&] {
                CUstreamCaptureStatus c;
                is_capturing((CUstream)stream, &c);
                sink = c;
              }));
  std::printf("cuStreamGetId          %6.1f ns\n", ns_per_call([&] {
                unsigned long long id;
                get_id((CUstream)stream, &id);
                sink = (int)id;
              }));
  if (get_device != nullptr) {
    std::printf("cuStreamGetDevice      %6.1f ns\n", ns_per_call([&] {
                  CUdevice d;
                  get_device((CUstream)stream, &d);
                  sink = d;
                }));
  }
  if (get_ctx != nullptr) {
    std::printf("cuStreamGetCtx         %6.1f ns\n", ns_per_call([&] {
                  CUcontext c;
                  get_ctx((CUstream)stream, &c);
                  sink = c != nullptr;
                }));
  }
  std::printf("cudaEventRecord        %6.1f ns\n", ns_per_call([&] {
                static cudaEvent_t e = [] {
                  cudaEvent_t x;
                  cudaEventCreateWithFlags(&x, cudaEventDisableTiming);
                  return x;
                }();
                cudaEventRecord(e, stream);
              }));
  std::printf("seq_cst fence          %6.1f ns\n",
              ns_per_call([&] { std::atomic_thread_fence(std::memory_order_seq_cst); }));
  const long mask = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  std::printf("membarrier query mask  %ld (private expedited %s)\n", mask,
              mask >= 0 && (mask & MEMBARRIER_CMD_PRIVATE_EXPEDITED) ? "available" : "NOT available");
  std::printf("steady_clock::now      %6.1f ns\n",
              ns_per_call([&] { sink = (int)std::chrono::steady_clock::now().time_since_epoch().count(); }));
  // The stream checks (an allocation's capture check and identity, a free's
  // capture check) from several threads, each on its own stream.
  for (const int threads : {1, 4, 8, 16}) {
    std::vector<cudaStream_t> streams(threads);
    for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const int n = 1000000;
    std::atomic<int> ready{0};
    std::vector<double> ns(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        cudaFree(nullptr);  // the primary context current on this thread
        ready.fetch_add(1);
        while (ready.load() < threads) {
        }
        const CUstream s = reinterpret_cast<CUstream>(streams[t]);
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n; ++i) {
          CUstreamCaptureStatus c;
          unsigned long long id;
          is_capturing(s, &c);
          get_id(s, &id);
          is_capturing(s, &c);
        }
        ns[t] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
      });
    }
    for (auto& th : pool) th.join();
    double mean = 0;
    for (double v : ns) mean += v / threads;
    std::printf("stream checks of a pair (2 capture checks + identity), %2d threads: %6.1f ns a pair a thread\n",
                threads, mean);
    for (auto& s : streams) cudaStreamDestroy(s);
  }
  return 0;
}
