// The gpu suite's TestDevice: kernels write and check tags in device memory.
#include "support/test_device.hpp"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace sova::test {

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "cuda test device: %s failed: %s\n", what, cudaGetErrorString(error));
    std::abort();
  }
}

__global__ void fill_kernel(std::uint32_t* words, std::size_t count, std::uint32_t tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    words[i] = tag;
  }
}

__global__ void expect_kernel(const std::uint32_t* words, std::size_t count, std::uint32_t tag,
                              unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    mine += words[i] != tag;
  }
  if (mine != 0) atomicAdd(wrong, mine);
}

// Spins for about `nanoseconds` of GPU time (one thread is enough: the point
// is to keep the stream busy, not the GPU).
__global__ void busy_kernel(unsigned long long nanoseconds) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < nanoseconds) {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  }
}

unsigned blocks_for(std::size_t count) {
  const std::size_t blocks = (count + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? (blocks == 0 ? 1 : blocks) : 1024);
}

class CudaTestDevice final : public TestDevice {
 public:
  CudaTestDevice() {
    check(cudaSetDevice(0), "cudaSetDevice");
    check(cudaMalloc(&wrong_, sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemset(wrong_, 0, sizeof(unsigned long long)), "cudaMemset");
  }
  ~CudaTestDevice() override { cudaFree(wrong_); }
  const char* name() const override { return "cuda"; }
  Driver& driver() override { return cuda_driver(); }
  cudaStream_t create_stream() override {
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    return stream;
  }
  void destroy_stream(cudaStream_t stream) override { check(cudaStreamDestroy(stream), "cudaStreamDestroy"); }
  void fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    const std::size_t count = bytes / 4;
    fill_kernel<<<blocks_for(count), 256, 0, stream>>>(static_cast<std::uint32_t*>(ptr), count, tag);
    check(cudaGetLastError(), "fill_kernel launch");
  }
  void expect(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    const std::size_t count = bytes / 4;
    expect_kernel<<<blocks_for(count), 256, 0, stream>>>(static_cast<const std::uint32_t*>(ptr), count, tag, wrong_);
    check(cudaGetLastError(), "expect_kernel launch");
  }
  void busy(cudaStream_t stream, std::chrono::microseconds duration) override {
    busy_kernel<<<1, 1, 0, stream>>>(static_cast<unsigned long long>(duration.count()) * 1000ull);
    check(cudaGetLastError(), "busy_kernel launch");
  }
  void synchronize(cudaStream_t stream) override { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }
  void synchronize_device() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
  std::uint64_t mismatches() override {
    unsigned long long value = 0;
    check(cudaMemcpy(&value, wrong_, sizeof value, cudaMemcpyDeviceToHost), "cudaMemcpy");
    return value;
  }
  void reset_mismatches() override {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemset(wrong_, 0, sizeof(unsigned long long)), "cudaMemset");
  }
  cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) override {
    return cudaStreamBeginCapture(stream, mode);
  }
  cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph) override {
    const cudaError_t result = cudaStreamEndCapture(stream, graph);
    // A refused end (invalidated, unjoined) is the caller's to judge: it must
    // not stay the runtime's last error, which the next kernel launch's check reads.
    if (result != cudaSuccess) (void)cudaGetLastError();
    return result;
  }
  cudaError_t instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) override {
    return cudaGraphInstantiate(exec, graph, 0);
  }
  cudaError_t launch_graph(cudaGraphExec_t exec, cudaStream_t stream) override { return cudaGraphLaunch(exec, stream); }
  cudaError_t destroy_graph(cudaGraph_t graph) override { return cudaGraphDestroy(graph); }
  cudaError_t destroy_graph_exec(cudaGraphExec_t exec) override { return cudaGraphExecDestroy(exec); }

 private:
  unsigned long long* wrong_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_test_device() { return std::make_unique<CudaTestDevice>(); }

TestDevice& test_device() {
  static std::unique_ptr<TestDevice> device = make_test_device();
  return *device;
}

}  // namespace sova::test
