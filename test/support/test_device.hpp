// TestDevice: what the conformance suite needs from "a device", so the same
// tests run on the host simulation (sim suite, CI) and on a GPU (gpu suite).
//
// Work is stream-ordered: fill/expect/busy are enqueued on the stream, as a
// kernel would be. `expect` never fails a test by itself: it counts words
// that did not hold the tag, read back by mismatches() after a synchronize.
// That is how premature reuse shows up: stream A still checking a block
// another stream was handed and overwrote.
#pragma once

#include <sova/driver.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace sova::test {

class TestDevice {
 public:
  virtual ~TestDevice() = default;
  virtual const char* name() const = 0;  ///< "sim" or "cuda"
  /// The device the tests' pools and streams are on, current for the test
  /// thread: 0 on the sim; on the GPU SOVA_TEST_DEVICE (default 0), so that
  /// the suite runs with any device current (tools/run-tests --gpu-device=N).
  virtual int ordinal() const { return 0; }
  virtual Driver& driver() = 0;
  virtual cudaStream_t create_stream() = 0;
  virtual void destroy_stream(cudaStream_t stream) = 0;
  /// Writes `tag` into every 32-bit word of [ptr, ptr + bytes).
  virtual void fill(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) = 0;
  /// Counts the words of [ptr, ptr + bytes) that are not `tag`.
  virtual void expect(void* ptr, std::size_t bytes, std::uint32_t tag, cudaStream_t stream) = 0;
  /// Keeps the stream busy for about `duration`.
  virtual void busy(cudaStream_t stream, std::chrono::microseconds duration) = 0;
  virtual void synchronize(cudaStream_t stream) = 0;
  virtual void synchronize_device() = 0;
  /// Words found wrong by expect() so far (synchronize first).
  virtual std::uint64_t mismatches() = 0;
  virtual void reset_mismatches() = 0;

  // Graphs: the runtime's stream capture on a GPU, SimDriver's model on the
  // sim (lib/driver/sim/sim_graphs.hpp). fill/expect/busy on a capturing
  // stream are recorded, and run at each launch.
  virtual cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) = 0;
  virtual cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph) = 0;
  virtual cudaError_t instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) = 0;
  virtual cudaError_t launch_graph(cudaGraphExec_t exec, cudaStream_t stream) = 0;
  virtual cudaError_t destroy_graph(cudaGraph_t graph) = 0;
  virtual cudaError_t destroy_graph_exec(cudaGraphExec_t exec) = 0;
};

/// The device of this test binary: SimDriver in sova_tests, the GPU in sova_gpu_tests.
std::unique_ptr<TestDevice> make_test_device();

/// One process-wide device for the whole binary (streams and drivers are costly to set up).
TestDevice& test_device();

}  // namespace sova::test
