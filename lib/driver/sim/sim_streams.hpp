// sova sim — the stream registry: handles, the implicit default streams, and
// the legacy stream's implicit synchronization.
//
// Handles. A created stream gets the handle of the lowest free slot of a
// table, so a destroyed stream's handle comes back on the next create (as
// cudaStream_t pointers do), while its stream_id is new and never reused.
// Slot handles are fake pointers (kSlotBase + slot * kSlotStride) that are
// never dereferenced and never equal 0, cudaStreamLegacy or cudaStreamPerThread.
// A handle of an empty slot or of no slot is cudaErrorInvalidResourceHandle.
//
// Implicit streams (created on first use, on the calling thread's current
// device, thread_current_device()):
//  * 0 and cudaStreamLegacy: the device's legacy default stream.
//  * cudaStreamPerThread: one stream per host thread and device, retired
//    (drained, then joined) when that thread exits.
//
// Legacy synchronization, as the CUDA docs ("Stream synchronization behavior")
// define it: an action on the legacy stream (launch, delay, event record,
// stream wait) first waits for all work submitted earlier to the device's
// blocking streams; work later submitted to a blocking stream waits for the
// legacy work submitted before it. Non-blocking streams take part in neither.
// Per-thread default streams count as blocking: the docs say "the per-thread
// default stream is not a non-blocking stream and will synchronize with the
// legacy default stream if both are used in a program", and like an explicitly
// created stream it does not synchronize with other streams. Query and
// synchronize of the legacy stream cover its own queue only (whose actions
// already include those implicit waits).
//
// Thread safety: one mutex guards the tables and makes a submission's
// implicit-wait capture and enqueue atomic with respect to other submissions,
// so "earlier" and "later" above are well defined.
#pragma once

#include "sim_stream.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace sova::sim {

/// The calling thread's current device (SimDriver::set_current_device; 0
/// until set), shared by every simulation in the process as the runtime's is.
int& thread_current_device() noexcept;

class SimStreams : public std::enable_shared_from_this<SimStreams> {
 public:
  explicit SimStreams(int device_count);
  /// Calls shutdown().
  ~SimStreams();
  SimStreams(const SimStreams&) = delete;
  SimStreams& operator=(const SimStreams&) = delete;

  /// Closes every stream, waits for every queue to drain and joins every
  /// worker. Afterwards every call fails with cudaErrorInvalidResourceHandle
  /// (create returns nullptr). Idempotent; not from a stream worker.
  void shutdown();

  /// nullptr only after shutdown().
  cudaStream_t create(int device, bool blocking);
  /// Slot handles only (the implicit streams cannot be destroyed). Returns at
  /// once; queued work still runs.
  cudaError_t destroy(cudaStream_t handle);

  /// Destroyed streams whose worker is not joined yet: busy when destroyed,
  /// joined by a later create or destroy once drained (an idle one is joined
  /// by destroy itself). For tests.
  std::size_t retired_count();

  /// Enqueues `item` on the stream, adding the legacy stream's implicit
  /// waits. `*at` (if given) receives the item's Point.
  cudaError_t submit(cudaStream_t handle, Item item, Point* at = nullptr);
  /// The Point covering everything submitted to the stream so far.
  cudaError_t tail(cudaStream_t handle, Point* out);
  /// The device of the stream `handle` names (implicit handles: the calling
  /// thread's current device).
  cudaError_t device_of(cudaStream_t handle, int* out);
  cudaError_t id(cudaStream_t handle, unsigned long long* out);
  /// Points covering all work submitted so far to every stream of `device`,
  /// destroyed streams still draining included.
  std::vector<Point> device_tails(int device);

  /// Called by a host thread's exit hook: retires its per-thread stream and
  /// waits until its queued work has run and its worker is joined.
  void thread_exited(std::uint64_t thread_serial);

 private:
  using StreamPtr = std::shared_ptr<Stream>;

  // All with mu_ held.
  StreamPtr resolve(cudaStream_t handle);
  StreamPtr make_stream(int device, StreamKind kind);
  // Removes and returns the retired streams whose workers have exited; the
  // caller joins them after unlocking (an exiting worker's thread hook may
  // still need the lock).
  std::vector<StreamPtr> take_exited();
  void add_legacy_waits(Stream& s, Item& item);
  template <class F>
  void for_each_stream(F&& f);

  const int device_count_;
  std::mutex mu_;
  bool shut_down_ = false;
  std::vector<StreamPtr> slots_;                                   // created streams; null = free
  std::vector<StreamPtr> legacy_;                                  // per device; null until used
  std::map<std::pair<std::uint64_t, int>, StreamPtr> per_thread_;  // by host thread serial, device
  // Closed, maybe still draining. Like CUDA (measured: tools/probe_stream_reuse),
  // a destroyed stream's handle is handed out again at once, even while its
  // work still runs; the pool's stream checks must cope with that.
  std::vector<StreamPtr> retired_;
};

}  // namespace sova::sim
