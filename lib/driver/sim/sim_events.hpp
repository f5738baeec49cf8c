// sova sim — events: a table of live events, each holding the Point (stream
// position) its last record captured.
//
// Semantics as cudaEvent_t without timing: an event never recorded counts as
// complete; re-recording replaces the captured Point; waits and queries use
// the Point captured at their own call, so a later re-record does not affect
// a wait already enqueued. Handles are the addresses of live Event objects;
// an unknown or destroyed handle is cudaErrorInvalidResourceHandle (like CUDA,
// a destroyed event's address may come back for a later event). An event
// belongs to a device, and can be recorded only on that device's streams.
//
// Thread safety: one mutex over the table and the captured Points.
#pragma once

#include <sova/driver.hpp>

#include "sim_stream.hpp"

#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace sova::sim {

class SimEvents {
 public:
  /// An event of `device` (record accepts only streams of that device).
  cudaError_t create(int device, EventHandle* out);
  cudaError_t destroy(EventHandle event);
  /// Whether `event` is live and may be recorded on a stream of
  /// `stream_device`: cudaErrorInvalidResourceHandle if not, as
  /// cudaEventRecord with an event and a stream of different devices.
  cudaError_t check(EventHandle event, int stream_device);
  /// Stores the Point of the event's new marker.
  cudaError_t set(EventHandle event, Point at);
  /// The Point of the last record; empty when never recorded.
  cudaError_t get(EventHandle event, std::optional<Point>* out);

 private:
  struct Event {
    int device = 0;
    std::optional<Point> at;
  };
  std::mutex mu_;
  std::unordered_map<EventHandle, std::unique_ptr<Event>> live_;
};

}  // namespace sova::sim
