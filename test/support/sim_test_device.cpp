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
      for (std::size_t i = 0; i < bytes / 4; ++i) std::atomic_ref<std::uint32_t>(words[i]).store(tag, std::memory_order_relaxed);
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
