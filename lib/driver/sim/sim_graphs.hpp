// sova sim — stream capture and graphs, as the CUDA runtime has them.
//
// Capture. begin(stream, mode) puts a stream in capture: work then submitted
// to it (SimDriver::launch, delay) is recorded as nodes of the capture's graph
// instead of running. end(stream) returns the graph, or, if the capture was
// invalidated, cudaErrorStreamCaptureInvalidated and destroys the graph. Each
// capture has a process-unique id. Only single-stream capture is modelled:
// an event record or a stream wait on a capturing stream, and a query or
// synchronize of it, are refused with cudaErrorStreamCaptureUnsupported and
// invalidate the capture (CUDA accepts the first two, to fork and join
// streams; sova never uses them on a capturing stream, and the refusal makes
// a test see it if it did). A device synchronize while a stream of the device
// captures is refused and invalidates those captures, as in CUDA.
//
// Modes. Each host thread has a capture mode (exchange_mode; global until
// changed, shared by every simulation, as the runtime's). A "potentially
// unsafe" call (unsafe_call: the sim's VMM calls, unless the driver relaxes
// them, SimConfig::relax_vmm_calls) is prohibited, per the runtime's rules
// (cudaThreadExchangeStreamCaptureMode):
//   * thread in global mode: if this thread began a capture that is not
//     relaxed, or another thread began a global one;
//   * thread-local: if this thread began a capture that is not relaxed;
//   * relaxed: never.
// A prohibited call fails with cudaErrorStreamCaptureUnsupported, does
// nothing, and invalidates the captures that prohibited it.
//
// Graphs. instantiate copies a graph's nodes into an executable graph;
// launch enqueues them on a stream, in order, as items of that stream; the
// graph and every executable may be destroyed at any time (queued launches
// still run). User objects (retain_release_callback) are owned by the graph
// and shared by its executables and their queued launches: the callback runs
// once the last of them is gone — on the stream worker that finished the last
// launch, or on the thread that destroyed the last handle.
//
// Thread safety: one mutex over the tables. Callbacks run with it released.
#pragma once

#include "sim_stream.hpp"

#include <sova/driver.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sova::sim {

class SimStreams;

/// Whether `raw` (an int that may hold any value, core/raw_enum.hpp) is a
/// cudaStreamCaptureMode.
inline bool valid_capture_mode(int raw) noexcept {
  return raw == cudaStreamCaptureModeGlobal || raw == cudaStreamCaptureModeThreadLocal ||
         raw == cudaStreamCaptureModeRelaxed;
}

/// The calling thread's capture mode (cudaThreadExchangeStreamCaptureMode).
cudaStreamCaptureMode& thread_capture_mode() noexcept;

class SimGraphs {
 public:
  explicit SimGraphs(std::shared_ptr<SimStreams> streams);
  ~SimGraphs();
  SimGraphs(const SimGraphs&) = delete;
  SimGraphs& operator=(const SimGraphs&) = delete;

  cudaError_t begin(cudaStream_t stream, cudaStreamCaptureMode mode);
  cudaError_t end(cudaStream_t stream, cudaGraph_t* graph);
  cudaError_t info(cudaStream_t stream, CaptureInfo* out);
  /// Records `item` in the stream's capture if it captures: true (an
  /// invalidated capture drops it). False: the stream does not capture.
  bool capture_item(cudaStream_t stream, Item& item);
  /// A stream operation that conflicts with capture (event record, wait,
  /// query, synchronize): if the stream captures, invalidates the capture and
  /// returns cudaErrorStreamCaptureUnsupported; else cudaSuccess.
  cudaError_t conflicting_use(cudaStream_t stream);
  /// A device synchronize: refused (and the captures invalidated) while a
  /// stream of `device` captures.
  cudaError_t device_synchronize_allowed(int device);
  /// A potentially unsafe call from the calling thread (rules above).
  cudaError_t unsafe_call();

  cudaError_t instantiate(cudaGraphExec_t* exec, cudaGraph_t graph);
  cudaError_t launch(cudaGraphExec_t exec, cudaStream_t stream);
  cudaError_t destroy_graph(cudaGraph_t graph);
  cudaError_t destroy_exec(cudaGraphExec_t exec);
  cudaError_t retain_release_callback(cudaGraph_t graph, GraphReleaseCallback callback, void* context);

  /// Graphs and executables not yet destroyed (for tests).
  std::size_t live_graphs();
  std::size_t live_execs();

 private:
  struct UserObject;
  struct Body;
  struct Capture;
  using BodyPtr = std::shared_ptr<Body>;

  // With mu_ held.
  std::shared_ptr<Capture> capture_of(unsigned long long stream_id);
  void invalidate_locked(Capture& c);

  std::shared_ptr<SimStreams> streams_;
  std::mutex mu_;
  std::atomic<int> capturing_{0};  ///< captures in progress: the common case skips the lock
  std::map<unsigned long long, std::shared_ptr<Capture>> captures_;  // by stream id
  std::map<std::uintptr_t, BodyPtr> graphs_;                         // by handle
  std::map<std::uintptr_t, BodyPtr> execs_;                          // by handle; an exec's body is a copy
  std::uintptr_t next_handle_ = 0;
};

}  // namespace sova::sim
