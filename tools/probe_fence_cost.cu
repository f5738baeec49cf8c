// Probe: what a fence beside a free costs the seed loop (one non-blocking
// stream, N x (kernel over a buffer), timed whole with the final synchronize),
// per kind of stream-side call added to every iteration. Variants alternate
// within each round, so drift on the host hits them alike; each figure is the
// best of the rounds, and the ratio is to the bare loop of the same size.
// docs/design.md, "Fences on the hot path", cites its answers.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define RT(call)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (call);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("FAILED %s: %s (line %d)\n", #call, cudaGetErrorName(e_), __LINE__);     \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

__global__ void touch(float* p, float tag, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) p[i] = p[i] * 0.5f + tag;
}

enum Variant {
  bare,
  record_one,      // cudaEventRecord of one event, re-recorded each time
  record_ring,     // cudaEventRecord from a ring of 8 events
  query_record,    // cudaEventQuery of the previous event, then record the next (sova's fence before)
  wrapped_record,  // the capture-mode exchange twice, cudaPeekAtLastError, cudaEventRecord
  query_only,      // cudaEventQuery of the event recorded in the previous iteration (no new record)
  write_value,     // cuStreamWriteValue64 of the iteration into pinned host memory
  clock_read,      // std::chrono::steady_clock::now()
  kVariants
};
const char* kNames[kVariants] = {"bare", "record_one", "record_ring", "query+record", "wrapped_record",
                                 "query_only", "write_value64", "clock_read"};

PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_mode = nullptr;
PFN_cuStreamWriteValue64_v11070 write_value64 = nullptr;

double run_loop(Variant v, float* buffer, std::size_t floats, cudaStream_t s, cudaEvent_t* ring, CUdeviceptr host_word,
                int iterations) {
  volatile long long sink = 0;
  const unsigned threads = 256;
  const unsigned blocks = static_cast<unsigned>((floats + threads - 1) / threads);
  RT(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    touch<<<blocks, threads, 0, s>>>(buffer, static_cast<float>(i), floats);
    switch (v) {
      case bare: break;
      case record_one: RT(cudaEventRecord(ring[0], s)); break;
      case record_ring: RT(cudaEventRecord(ring[i & 7], s)); break;
      case query_record: {
        const cudaError_t q = cudaEventQuery(ring[(i + 7) & 7]);
        if (q != cudaSuccess) (void)cudaGetLastError();
        RT(cudaEventRecord(ring[i & 7], s));
        break;
      }
      case wrapped_record: {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        exchange_mode(&mode);
        (void)cudaPeekAtLastError();
        RT(cudaEventRecord(ring[i & 7], s));
        exchange_mode(&mode);
        break;
      }
      case query_only: {
        const cudaError_t q = cudaEventQuery(ring[0]);
        if (q != cudaSuccess) (void)cudaGetLastError();
        sink = sink + q;
        break;
      }
      case write_value:
        if (write_value64(reinterpret_cast<CUstream>(s), host_word, static_cast<cuuint64_t>(i), 0) != CUDA_SUCCESS) {
          std::printf("FAILED cuStreamWriteValue64\n");
          std::exit(1);
        }
        break;
      case clock_read: sink = sink + std::chrono::steady_clock::now().time_since_epoch().count(); break;
      default: break;
    }
  }
  RT(cudaStreamSynchronize(s));
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const int iterations = 100;
  RT(cudaFree(nullptr));
  cudaDriverEntryPointQueryResult q;
  RT(cudaGetDriverEntryPointByVersion("cuThreadExchangeStreamCaptureMode", reinterpret_cast<void**>(&exchange_mode),
                                      10010, cudaEnableDefault, &q));
  RT(cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", reinterpret_cast<void**>(&write_value64), 11070,
                                      cudaEnableDefault, &q));
  cudaStream_t s;
  RT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t ring[8];
  for (cudaEvent_t& e : ring) RT(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  RT(cudaEventRecord(ring[0], s));
  void* host = nullptr;
  RT(cudaHostAlloc(&host, 64, cudaHostAllocMapped));
  void* host_device = nullptr;
  RT(cudaHostGetDevicePointer(&host_device, host, 0));
  const CUdeviceptr host_word = reinterpret_cast<CUdeviceptr>(host_device);
  cudaDeviceProp prop;
  RT(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, %d rounds of %d iterations, best of rounds; ratio to bare of the same size and round set\n",
              prop.name, rounds, iterations);
  for (const std::size_t mib : {std::size_t{1}, std::size_t{4}, std::size_t{64}}) {
    const std::size_t floats = (mib << 20) / sizeof(float);
    float* buffer = nullptr;
    RT(cudaMalloc(&buffer, mib << 20));
    std::vector<double> best(kVariants, 1e30);
    for (int v = 0; v < kVariants; ++v) run_loop(static_cast<Variant>(v), buffer, floats, s, ring, host_word, 10);
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < kVariants; ++k) {
        const int v = (r % 2 == 0) ? k : kVariants - 1 - k;  // order alternates between rounds
        best[v] = std::min(best[v], run_loop(static_cast<Variant>(v), buffer, floats, s, ring, host_word, iterations));
      }
    }
    for (int v = 0; v < kVariants; ++v) {
      std::printf("%3zu MiB  %-15s %8.1f us/loop  %6.2f us/iter  %.3fx\n", mib, kNames[v], best[v],
                  best[v] / iterations, best[v] / best[bare]);
    }
    RT(cudaFree(buffer));
  }
  return 0;
}
