// sova sim — SimDriver: streams and events (semantics in sim_streams.hpp and
// sim_events.hpp). Host-side waits block the calling thread on the stream's
// completion count; calling them from a stream's own work deadlocks, as a
// kernel waiting on its own stream would hang.
#include "sim_state.hpp"

#include "base/implicit_stream.hpp"
#include "base/raw_enum.hpp"

#include <optional>
#include <utility>
#include <vector>

namespace sova {

cudaError_t SimDriver::event_create(EventHandle* event) noexcept {
  state_->count(SimCall::event_create);
  return sim::guarded([&] { return state_->events.create(sim::thread_current_device(), event); });
}

cudaError_t SimDriver::event_create_on(int device, EventHandle* event) noexcept {
  state_->count(SimCall::event_create_on);
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  return sim::guarded([&] { return state_->events.create(device, event); });
}

cudaError_t SimDriver::event_destroy(EventHandle event) noexcept {
  state_->count(SimCall::event_destroy);
  return sim::guarded([&] {
    const cudaError_t e = state_->events.destroy(event);
    if (e == cudaSuccess) state_->graphs.forget_event(event);
    return e;
  });
}

namespace {

// event_record's work, shared with event_record_on (which counts as itself).
cudaError_t record_event(SimDriver::State& state, EventHandle event, cudaStream_t stream) noexcept {
  return sim::guarded([&] {
    // Check the stream and the event first so a bad one enqueues nothing.
    int device = 0;
    cudaError_t e = state.streams->device_of(stream, &device);
    if (e != cudaSuccess) return e;
    e = state.events.check(event, device);
    if (e != cudaSuccess) return e;
    // On a capturing stream: a captured event, no marker (sim_graphs.hpp).
    if (state.graphs.record_event(stream, event)) return cudaSuccess;
    sim::Point at;
    e = state.streams->submit(stream, sim::Item{}, &at);  // the marker
    if (e != cudaSuccess) return e;
    e = state.events.set(event, std::move(at));
    if (e != cudaSuccess) return e;  // destroyed meanwhile; the marker is harmless
    state.events_recorded.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

}  // namespace

cudaError_t SimDriver::event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept {
  state_->count(SimCall::event_record_on);
  if (!detail::is_implicit_stream(stream)) return record_event(*state_, event, stream);
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  // The implicit handles as `device` current names them, the thread's own
  // current device given back.
  int& current = sim::thread_current_device();
  const int saved = current;
  current = device;
  const cudaError_t result = record_event(*state_, event, stream);
  current = saved;
  return result;
}

cudaError_t SimDriver::event_record(EventHandle event, cudaStream_t stream) noexcept {
  state_->count(SimCall::event_record);
  return record_event(*state_, event, stream);
}

cudaError_t SimDriver::event_query(EventHandle event) noexcept {
  state_->count(SimCall::event_query);
  state_->event_queries.fetch_add(1, std::memory_order_relaxed);
  return sim::guarded([&] {
    std::optional<sim::Point> at;
    cudaError_t e = state_->events.get(event, &at);
    if (e != cudaSuccess) return e;
    e = state_->graphs.event_use(event);  // a captured event has no status
    if (e != cudaSuccess) return e;
    return !at || at->reached() ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t SimDriver::event_synchronize(EventHandle event) noexcept {
  state_->count(SimCall::event_synchronize);
  return sim::guarded([&] {
    std::optional<sim::Point> at;
    cudaError_t e = state_->events.get(event, &at);
    if (e != cudaSuccess) return e;
    e = state_->graphs.event_use(event);
    if (e != cudaSuccess) return e;
    if (at) at->wait();
    return cudaSuccess;
  });
}

cudaError_t SimDriver::stream_wait_event(cudaStream_t stream, EventHandle event) noexcept {
  state_->count(SimCall::stream_wait_event);
  return sim::guarded([&] {
    std::optional<sim::Point> at;  // captured now: a later re-record does not matter
    cudaError_t e = state_->events.get(event, &at);
    if (e != cudaSuccess) return e;
    sim::Point tail;
    e = state_->streams->tail(stream, &tail);  // checks the handle
    if (e != cudaSuccess) return e;
    // Fork and join under capture (sim_graphs.hpp).
    if (cudaError_t result = cudaSuccess; state_->graphs.wait_event(stream, event, at.has_value(), &result)) {
      return result;
    }
    if (!at) return cudaSuccess;  // waiting for an event never recorded is a no-op, as in CUDA
    sim::Item item;
    item.waits.push_back(std::move(*at));
    e = state_->streams->submit(stream, std::move(item));
    if (e != cudaSuccess) return e;
    state_->stream_waits.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

cudaError_t SimDriver::stream_query(cudaStream_t stream) noexcept {
  state_->count(SimCall::stream_query);
  return sim::guarded([&] {
    sim::Point tail;
    cudaError_t e = state_->streams->tail(stream, &tail);
    if (e != cudaSuccess) return e;
    e = state_->graphs.conflicting_use(stream);  // invalid during capture
    if (e != cudaSuccess) return e;
    return tail.reached() ? cudaSuccess : cudaErrorNotReady;
  });
}

cudaError_t SimDriver::stream_synchronize(cudaStream_t stream) noexcept {
  state_->count(SimCall::stream_synchronize);
  return sim::guarded([&] {
    sim::Point tail;
    cudaError_t e = state_->streams->tail(stream, &tail);
    if (e != cudaSuccess) return e;
    e = state_->graphs.conflicting_use(stream);  // invalid during capture
    if (e != cudaSuccess) return e;
    tail.wait();
    return cudaSuccess;
  });
}

cudaError_t SimDriver::stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept {
  state_->count(SimCall::stream_is_capturing);
  state_->stream_queries.fetch_add(1, std::memory_order_relaxed);
  return sim::guarded([&] {
    if (capturing == nullptr) return cudaErrorInvalidValue;
    CaptureInfo info;
    const cudaError_t e = state_->graphs.info(stream, &info);  // validates the handle
    if (e != cudaSuccess) return e;
    *capturing = info.status != cudaStreamCaptureStatusNone;  // an invalidated capture still captures
    return cudaSuccess;
  });
}

cudaError_t SimDriver::stream_id(cudaStream_t stream, unsigned long long* id) noexcept {
  state_->count(SimCall::stream_id);
  state_->stream_queries.fetch_add(1, std::memory_order_relaxed);
  return sim::guarded([&] {
    if (id == nullptr) return cudaErrorInvalidValue;
    // As cuStreamGetId on the H100: refused for a stream being captured, and
    // the capture invalidated.
    if (cudaError_t e = state_->graphs.conflicting_use(stream); e != cudaSuccess) return e;
    return state_->streams->id(stream, id);
  });
}

cudaError_t SimDriver::stream_device(cudaStream_t stream, int* device) noexcept {
  state_->count(SimCall::stream_device);
  state_->stream_queries.fetch_add(1, std::memory_order_relaxed);
  return sim::guarded([&] {
    if (device == nullptr) return cudaErrorInvalidValue;
    // Allowed under capture (Driver::stream_device), unlike stream_id.
    return state_->streams->device_of(stream, device);
  });
}

cudaError_t SimDriver::device_synchronize(int device) noexcept {
  state_->count(SimCall::device_synchronize);
  return sim::guarded([&] {
    if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
    if (cudaError_t e = state_->graphs.device_synchronize_allowed(device); e != cudaSuccess) return e;
    // Work submitted after the snapshot is not waited for, as in CUDA.
    for (const sim::Point& p : state_->streams->device_tails(device)) p.wait();
    state_->device_synchronizes.fetch_add(1, std::memory_order_relaxed);
    return cudaSuccess;
  });
}

// ---- graph capture (sim_graphs.hpp) ------------------------------------------

cudaError_t SimDriver::stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept {
  state_->count(SimCall::stream_capture_info);
  state_->stream_queries.fetch_add(1, std::memory_order_relaxed);
  return sim::guarded([&] { return state_->graphs.info(stream, out); });
}

cudaError_t SimDriver::exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept {
  state_->count(SimCall::exchange_capture_mode);
  if (mode == nullptr) return cudaErrorInvalidValue;
  if (!sim::valid_capture_mode(detail::raw_enum(*mode))) return cudaErrorInvalidValue;
  std::swap(*mode, sim::thread_capture_mode());
  return cudaSuccess;
}

cudaError_t SimDriver::graph_on_release(cudaGraph_t graph, GraphReleaseCallback callback, void* context) noexcept {
  state_->count(SimCall::graph_on_release);
  return sim::guarded([&] { return state_->graphs.retain_release_callback(graph, callback, context); });
}

cudaError_t SimDriver::stream_create(int device, cudaStream_t* out) noexcept {
  state_->count(SimCall::stream_create);
  if (out == nullptr) return cudaErrorInvalidValue;
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  return sim::guarded([&] {
    *out = state_->streams->create(device, false);
    return *out != nullptr ? cudaSuccess : cudaErrorInvalidResourceHandle;
  });
}

cudaError_t SimDriver::stream_destroy(cudaStream_t stream) noexcept {
  state_->count(SimCall::stream_destroy);
  return sim::guarded([&] { return state_->streams->destroy(stream); });
}

cudaError_t SimDriver::begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) noexcept {
  return sim::guarded([&] { return state_->graphs.begin(stream, mode); });
}

cudaError_t SimDriver::end_capture(cudaStream_t stream, cudaGraph_t* graph) noexcept {
  return sim::guarded([&] { return state_->graphs.end(stream, graph); });
}

cudaError_t SimDriver::graph_instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) noexcept {
  return sim::guarded([&] { return state_->graphs.instantiate(exec, graph); });
}

cudaError_t SimDriver::graph_launch(cudaGraphExec_t exec, cudaStream_t stream) noexcept {
  return sim::guarded([&] { return state_->graphs.launch(exec, stream); });
}

cudaError_t SimDriver::graph_destroy(cudaGraph_t graph) noexcept {
  return sim::guarded([&] { return state_->graphs.destroy_graph(graph); });
}

cudaError_t SimDriver::graph_exec_destroy(cudaGraphExec_t exec) noexcept {
  return sim::guarded([&] { return state_->graphs.destroy_exec(exec); });
}

std::size_t SimDriver::live_graphs() const { return state_->graphs.live_graphs(); }
std::size_t SimDriver::live_graph_execs() const { return state_->graphs.live_execs(); }

}  // namespace sova
