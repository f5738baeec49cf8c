// Shared helpers for the conformance suite's capture tests (sim and GPU):
// a captured graph with its executable, what graphs hold of a pool, and
// streams and events for forking and joining a capture's streams.
#pragma once

#include "conformance/pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>

namespace sova::test {

/// A captured graph and its executable, destroyed at scope exit unless taken.
struct Graph {
  TestDevice& device;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  explicit Graph(TestDevice& d) : device(d) {}
  ~Graph() { destroy(); }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  void end(cudaStream_t stream) {
    REQUIRE(device.end_capture(stream, &graph) == cudaSuccess);
    REQUIRE(device.instantiate(&exec, graph) == cudaSuccess);
  }
  void launch(cudaStream_t stream) { REQUIRE(device.launch_graph(exec, stream) == cudaSuccess); }
  void destroy() {
    if (exec != nullptr) device.destroy_graph_exec(exec);
    if (graph != nullptr) device.destroy_graph(graph);
    exec = nullptr;
    graph = nullptr;
  }
};

/// What graphs hold of the pool. A graph's memory comes back once the
/// driver's release callback ran, which CUDA does on its own thread some time
/// after the last launch completes: so a value that should drop is polled for
/// (up to 10 s) rather than read once.
inline std::uint64_t held_by_graphs(Pool& pool, std::uint64_t expected) {
  std::uint64_t held = pool.graph_memory_stats().held_bytes;
  for (int i = 0; i < 10000 && held != expected; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    held = pool.graph_memory_stats().held_bytes;
  }
  return held;
}

/// An event of the device's driver, destroyed at scope exit.
class ScopedEvent {
 public:
  explicit ScopedEvent(TestDevice& device) : device_(device) {
    REQUIRE(device_.driver().event_create(&event_) == cudaSuccess);
  }
  ~ScopedEvent() { device_.driver().event_destroy(event_); }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  operator EventHandle() const { return event_; }

 private:
  TestDevice& device_;
  EventHandle event_ = nullptr;
};

/// `follower`'s later work depends on `leader`'s work so far: an event record
/// on `leader` and a wait of `follower` on it (cudaEventRecord +
/// cudaStreamWaitEvent). Under capture, that forks a stream into the capture
/// (leader capturing) or joins it back (follower the origin).
inline void follow(TestDevice& device, cudaStream_t follower, cudaStream_t leader, EventHandle event) {
  REQUIRE(device.driver().event_record(event, leader) == cudaSuccess);
  REQUIRE(device.driver().stream_wait_event(follower, event) == cudaSuccess);
}

/// An origin stream and `sides` side streams to fork into its capture, with
/// one event for the fork and one a side for its join; all destroyed at scope
/// exit (the streams after the pool's work on them).
class ForkedStreams {
 public:
  ForkedStreams(TestDevice& device, std::size_t sides) : device_(device), origin_(device), fork_(device) {
    for (std::size_t i = 0; i < sides; ++i) {
      sides_.emplace_back(device);
      joins_.emplace_back(device);
    }
  }
  ForkedStreams(const ForkedStreams&) = delete;
  ForkedStreams& operator=(const ForkedStreams&) = delete;

  cudaStream_t origin() const { return origin_; }
  cudaStream_t side(std::size_t i) const { return sides_.at(i); }

  /// Every side follows the origin's work so far (the one fork event,
  /// recorded for each): with the origin capturing, forks the sides into its
  /// capture.
  void fork() {
    for (const ScopedStream& side : sides_) follow(device_, side, origin_, fork_);
  }
  /// The origin follows every side's work so far, each through its own join
  /// event: joins the sides back, as a capture's end requires.
  void join() {
    for (std::size_t i = 0; i < sides_.size(); ++i) follow(device_, origin_, sides_[i], joins_[i]);
  }

 private:
  TestDevice& device_;
  ScopedStream origin_;
  std::deque<ScopedStream> sides_;  // deques: streams and events cannot move
  ScopedEvent fork_;
  std::deque<ScopedEvent> joins_;
};

/// The end of a graph test, once its launches of `g` are queued on `stream`:
/// they ran with no mismatch on the device's counter, and destroying `g`
/// gives every block the graphs held back to `pool`, whose invariants hold.
inline void destroy_expecting_all_back(TestDevice& device, Pool& pool, Graph& g, cudaStream_t stream) {
  device.synchronize(stream);
  CHECK(device.mismatches() == 0);
  g.destroy();
  device.synchronize(stream);
  CHECK(held_by_graphs(pool, 0) == 0);
  pool.check_invariants();
}

/// Launches `g` `launches` times on `stream`; every `every`th launch, an
/// eager block of 1 MiB on `eager` meanwhile, which must be neither of the
/// graph's blocks `a` and `b` and reads back what was written (mismatches on
/// the device's counter).
inline void launch_beside_eager(TestDevice& device, Pool& pool, Graph& g, cudaStream_t stream, cudaStream_t eager,
                                int launches, int every, const void* a, const void* b) {
  constexpr std::size_t bytes = std::size_t{1} << 20;
  for (int i = 0; i < launches; ++i) {
    g.launch(stream);
    if (i % every == 0) {
      void* e = pool.allocate(bytes, eager);
      CHECK((e != a && e != b));
      device.fill(e, bytes, 0xEEu, eager);
      device.expect(e, bytes, 0xEEu, eager);
      pool.deallocate(e, eager);
    }
  }
}

/// The capture status and id of `stream`.
inline CaptureInfo capture_of(TestDevice& device, cudaStream_t stream) {
  CaptureInfo info;
  REQUIRE(device.driver().stream_capture_info(stream, &info) == cudaSuccess);
  return info;
}

}  // namespace sova::test
