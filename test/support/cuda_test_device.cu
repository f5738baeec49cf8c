// The gpu suite's TestDevice: tag_kernels.hpp's kernels write and check tags in device memory.
#include "support/tag_kernels.hpp"
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

class CudaTestDevice final : public TestDevice {
 public:
  CudaTestDevice() : ordinal_(device_from_environment()) {
    check(cudaSetDevice(ordinal_), "cudaSetDevice");
    check(cudaMalloc(&wrong_, sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemset(wrong_, 0, sizeof(unsigned long long)), "cudaMemset");
  }
  ~CudaTestDevice() override { cudaFree(wrong_); }
  const char* name() const override { return "cuda"; }
  int ordinal() const override { return ordinal_; }
  Driver& driver() override { return cuda_driver(); }
  cudaStream_t create_stream() override {
    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    return stream;
  }
  void destroy_stream(cudaStream_t stream) override { check(cudaStreamDestroy(stream), "cudaStreamDestroy"); }
  void fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    launch_fill(ptr, bytes, tag, stream);
  }
  void expect(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    launch_count_wrong(ptr, bytes, tag, wrong_, stream);
  }
  void busy(cudaStream_t stream, std::chrono::microseconds duration) override { launch_busy(stream, duration); }
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
    // not stay the runtime's last error, which a later check of cudaGetLastError reads.
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
  /// SOVA_TEST_DEVICE, or 0; a value that names no device aborts (a typo
  /// must not run the suite on device 0 and pass as device N).
  static int device_from_environment() {
    const char* text = std::getenv("SOVA_TEST_DEVICE");
    if (text == nullptr || *text == '\0') return 0;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (*end != '\0' || value < 0 || value >= count) {
      std::fprintf(stderr, "cuda test device: SOVA_TEST_DEVICE=%s names none of the %d devices\n", text, count);
      std::abort();
    }
    return static_cast<int>(value);
  }

  const int ordinal_;
  unsigned long long* wrong_ = nullptr;
};

}  // namespace

std::unique_ptr<TestDevice> make_test_device() { return std::make_unique<CudaTestDevice>(); }

TestDevice& test_device() {
  static std::unique_ptr<TestDevice> device = make_test_device();
  return *device;
}

}  // namespace sova::test
