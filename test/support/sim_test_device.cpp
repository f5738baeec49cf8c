// The sim suite's TestDevice: SimDriver streams run host work.
#include "support/test_device.hpp"

#include <sova/sim.hpp>

#include <atomic>
#include <cstring>
#include <thread>

namespace sova::test {

namespace {

class SimTestDevice final : public TestDevice {
 public:
  SimTestDevice() : sim_(config()) {}
  const char* name() const override { return "sim"; }
  Driver& driver() override { return sim_; }
  cudaStream_t create_stream() override { return sim_.create_stream(); }
  void destroy_stream(cudaStream_t stream) override { sim_.destroy_stream(stream); }
  void fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    // Relaxed atomic accesses: the negative control races two streams on
    // purpose, and a plain race would flood ThreadSanitizer with reports.
    sim_.launch(stream, [ptr, bytes, tag] {
      auto* words = static_cast<std::uint32_t*>(ptr);
      for (std::size_t i = 0; i < bytes / 4; ++i)
        std::atomic_ref<std::uint32_t>(words[i]).store(tag, std::memory_order_relaxed);
    });
  }
  void expect(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) override {
    sim_.launch(stream, [this, ptr, bytes, tag] {
      auto* words = static_cast<std::uint32_t*>(ptr);
      std::uint64_t wrong = 0;
      for (std::size_t i = 0; i < bytes / 4; ++i) {
        wrong += std::atomic_ref<std::uint32_t>(words[i]).load(std::memory_order_relaxed) != tag;
      }
      mismatches_.fetch_add(wrong);
    });
  }
  void busy(cudaStream_t stream, std::chrono::microseconds duration) override { sim_.delay(stream, duration); }
  void synchronize(cudaStream_t stream) override { sim_.stream_synchronize(stream); }
  void synchronize_device() override { sim_.device_synchronize(0); }
  std::uint64_t mismatches() override { return mismatches_.load(); }
  void reset_mismatches() override { mismatches_.store(0); }
  cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) override {
    return sim_.begin_capture(stream, mode);
  }
  cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph) override { return sim_.end_capture(stream, graph); }
  cudaError_t instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) override {
    return sim_.graph_instantiate(exec, graph);
  }
  cudaError_t launch_graph(cudaGraphExec_t exec, cudaStream_t stream) override {
    return sim_.graph_launch(exec, stream);
  }
  cudaError_t destroy_graph(cudaGraph_t graph) override { return sim_.graph_destroy(graph); }
  cudaError_t destroy_graph_exec(cudaGraphExec_t exec) override { return sim_.graph_exec_destroy(exec); }

 private:
  static SimConfig config() {
    SimConfig c;
    c.total_memory = std::size_t{1} << 30;
    return c;
  }
  SimDriver sim_;
  std::atomic<std::uint64_t> mismatches_{0};
};

}  // namespace

std::unique_ptr<TestDevice> make_test_device() { return std::make_unique<SimTestDevice>(); }

TestDevice& test_device() {
  static std::unique_ptr<TestDevice> device = make_test_device();
  return *device;
}

}  // namespace sova::test
