// sova sim — stream capture and graphs, as the CUDA runtime has them.
//
// Capture. begin(stream, mode) puts a stream in capture: work then submitted
// to it (SimDriver::launch, delay, copies) is recorded as nodes of the
// capture's graph instead of running. Each capture has a process-unique id.
// A query or synchronize of a capturing stream is refused with
// cudaErrorStreamCaptureUnsupported and invalidates the capture. A device
// synchronize while a stream of the device captures is refused and
// invalidates those captures, as in CUDA.
//
// Several streams (fork and join, the runtime's "cross-stream dependencies").
// Each stream of a capture has a tail: the nodes its next node will depend
// on (none right after begin). A node recorded on a stream depends on that
// tail and becomes the stream's tail.
//   * An event record on a capturing stream adds no node: the event becomes a
//     captured event, holding that stream's tail. A record outside capture
//     makes it an ordinary event again.
//   * A wait on a captured event by a stream outside capture makes that
//     stream join the event's capture (the same id, graph and status; it
//     reports capturing), with the event's nodes as its tail. A wait by a
//     stream of the same capture adds the event's nodes to its tail.
//   * A wait by a stream of another capture is cudaErrorStreamCaptureMerge;
//     a capturing stream's wait on an event recorded outside capture is
//     cudaErrorStreamCaptureIsolation (one never recorded is empty work: a
//     no-op); a wait on a captured event whose capture is over, and a query
//     or synchronize of a captured event, is cudaErrorCapturedEvent. Each
//     invalidates the captures involved that are in progress. The legacy
//     stream cannot join (cudaErrorStreamCaptureImplicit). A stream whose
//     capture is invalidated gets cudaErrorStreamCaptureInvalidated for any
//     wait; a stream outside capture cannot join an invalidated capture
//     (cudaErrorInvalidValue).
//   * end(stream) must be called on the origin stream (the one begin was
//     called on): on a joined stream it is cudaErrorStreamCaptureUnmatched
//     and invalidates the capture. On the origin it takes every stream of
//     the capture out of capture, then returns the graph, or an error and
//     destroys the graph: cudaErrorStreamCaptureInvalidated if the capture
//     was invalidated, cudaErrorStreamCaptureUnjoined if a joined stream was
//     not joined back (a node of its tail is not the origin's tail or an
//     ancestor of it: its last work is not waited on by the origin).
// A launch runs the graph's branches at once, as a GPU may: the nodes the
// origin recorded run on the launch stream, those of each other stream of
// the capture (that recorded any) on a lane of the executable's own (a
// stream of the simulation made at instantiate, destroyed with the
// executable); a node starts after its dependencies, the first of a lane
// after the launch stream's earlier work, and the launch stream's later
// work waits for every lane.
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
// launch enqueues them as items of the launch stream and its lanes (above);
// the graph and every executable may be destroyed at any time (queued
// launches still run). User objects (retain_release_callback) are owned by the graph
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
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sova::sim {

class SimStreams;

/// Whether `raw` (an int that may hold any value, base/raw_enum.hpp) is a
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
  /// An event record on `stream` (stream and event already checked). If the
  /// stream captures: `event` becomes a captured event, and true. Else false
  /// (the caller records it for real), and `event` is no longer a captured one.
  bool record_event(cudaStream_t stream, EventHandle event);
  /// A wait of `stream` on `event` (`recorded`: the event was ever recorded).
  /// True when capture rules decide it (fork, join, or an error above), with
  /// the result in `*result`; false for an ordinary wait, which the caller
  /// enqueues.
  bool wait_event(cudaStream_t stream, EventHandle event, bool recorded, cudaError_t* result);
  /// A query or synchronize of `event`: cudaErrorCapturedEvent (and its
  /// capture invalidated, if still in progress) for a captured event; else
  /// cudaSuccess.
  cudaError_t event_use(EventHandle event);
  /// `event` is destroyed: its handle may come back for a new event.
  void forget_event(EventHandle event);
  /// A stream operation that conflicts with capture (query, synchronize,
  /// a graph launch into it): if the stream captures, invalidates the
  /// capture and returns cudaErrorStreamCaptureUnsupported; else cudaSuccess.
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
  struct CapturedEvent;
  using BodyPtr = std::shared_ptr<Body>;

  // With mu_ held.
  std::shared_ptr<Capture> capture_of(unsigned long long stream_id);
  void invalidate_locked(Capture& c);
  /// Whether every joined stream's tail is the origin's tail or its ancestor.
  static bool joined_locked(const Capture& c);

  std::shared_ptr<SimStreams> streams_;
  std::mutex mu_;
  std::atomic<int> capturing_{0};  ///< streams in capture: the common case skips the lock
  std::atomic<std::size_t> captured_events_count_{0};  ///< captured_events_.size(), read without the lock
  std::map<unsigned long long, std::shared_ptr<Capture>> captures_;  // by stream id; joined streams share it
  std::map<EventHandle, CapturedEvent> captured_events_;
  std::map<std::uintptr_t, BodyPtr> graphs_;                         // by handle
  std::map<std::uintptr_t, BodyPtr> execs_;                          // by handle; an exec's body is a copy
  std::uintptr_t next_handle_ = 0;
};

}  // namespace sova::sim
