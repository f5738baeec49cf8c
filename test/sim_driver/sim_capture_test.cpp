// SimDriver: stream capture, capture modes, graphs and release callbacks
// (lib/driver/sim/sim_graphs.hpp), as the runtime behaves.
#include "support/catch.hpp"

#include "sim_test_util.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::simtest;
using namespace std::chrono_literals;

namespace {

struct Released {
  std::atomic<int> calls{0};
  static void callback(void* self) { static_cast<Released*>(self)->calls.fetch_add(1); }
};

/// Restores the calling thread's capture mode at scope exit.
class ScopedMode {
 public:
  ScopedMode(SimDriver& sim, cudaStreamCaptureMode mode) : sim_(sim), saved_(mode) {
    REQUIRE(sim_.exchange_capture_mode(&saved_) == cudaSuccess);
  }
  ~ScopedMode() { sim_.exchange_capture_mode(&saved_); }

 private:
  SimDriver& sim_;
  cudaStreamCaptureMode saved_;
};

}  // namespace

TEST_CASE("sim capture: work is recorded, not run, and each launch replays it in order", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  std::vector<int> trace;  // written by stream work only, read after synchronizing
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  bool capturing = false;
  REQUIRE(sim.stream_is_capturing(s, &capturing) == cudaSuccess);
  CHECK(capturing);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusActive);
  CHECK(info.id != 0);
  CHECK(info.graph != nullptr);
  sim.launch(s, [&] { trace.push_back(1); });
  sim.delay(s, 1ms);
  sim.launch(s, [&] { trace.push_back(2); });
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  CHECK(graph == info.graph);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(trace.empty());  // nothing ran during capture
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusNone);

  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  cudaStream_t other = sim.create_stream();
  REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, other) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  CHECK(trace == std::vector<int>{1, 2, 1, 2, 1, 2});
  CHECK(sim.graph_exec_destroy(exec) == cudaSuccess);
  CHECK(sim.graph_destroy(graph) == cudaSuccess);
  CHECK(sim.live_graphs() == 0);
  CHECK(sim.graph_destroy(graph) == cudaErrorInvalidValue);
  CHECK(sim.graph_launch(exec, s) == cudaErrorInvalidResourceHandle);
}

TEST_CASE("sim capture: ids are unique, and bad requests are refused", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t a = sim.create_stream();
  cudaStream_t b = sim.create_stream();
  CHECK(sim.begin_capture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  REQUIRE(sim.begin_capture(a, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(sim.begin_capture(a, cudaStreamCaptureModeRelaxed) == cudaErrorIllegalState);
  REQUIRE(sim.begin_capture(b, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CaptureInfo ia, ib;
  REQUIRE(sim.stream_capture_info(a, &ia) == cudaSuccess);
  REQUIRE(sim.stream_capture_info(b, &ib) == cudaSuccess);
  CHECK(ia.id != ib.id);
  CHECK(ia.graph != ib.graph);
  cudaGraphExec_t exec = nullptr;
  CHECK(sim.graph_instantiate(&exec, ia.graph) == cudaErrorInvalidValue);  // still being captured
  CHECK(sim.graph_destroy(ia.graph) == cudaErrorIllegalState);
  cudaGraph_t ga = nullptr, gb = nullptr;
  REQUIRE(sim.end_capture(a, &ga) == cudaSuccess);
  REQUIRE(sim.end_capture(b, &gb) == cudaSuccess);
  CHECK(sim.end_capture(a, &ga) == cudaErrorIllegalState);
  CHECK(sim.graph_destroy(ga) == cudaSuccess);
  CHECK(sim.graph_destroy(gb) == cudaSuccess);
}

TEST_CASE("sim capture: stream operations that conflict with capture invalidate it", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  EventHandle event = nullptr;
  REQUIRE(sim.event_create(&event) == cudaSuccess);
  SECTION("a query of the stream") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(sim.stream_query(s) == cudaErrorStreamCaptureUnsupported);
  }
  SECTION("a synchronize of the stream") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(sim.stream_synchronize(s) == cudaErrorStreamCaptureUnsupported);
  }
  SECTION("a device synchronize") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(sim.device_synchronize(0) == cudaErrorStreamCaptureUnsupported);
  }
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusInvalidated);
  bool capturing = false;
  REQUIRE(sim.stream_is_capturing(s, &capturing) == cudaSuccess);
  CHECK(capturing);  // until EndCapture
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
  CHECK(sim.end_capture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK(sim.live_graphs() == 0);
  // The stream works as before.
  REQUIRE(sim.event_record(event, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  sim.event_destroy(event);
}

TEST_CASE("sim capture: a stream that waits on a captured event joins the capture until it ends", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  EventHandle fork = nullptr, join = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.event_create(&join) == cudaSuccess);
  std::vector<int> trace;  // written by stream work only, read after synchronizing
  const SimCounters before = sim.counters();

  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  sim.launch(origin, [&] { trace.push_back(1); });
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  bool capturing = true;
  REQUIRE(sim.stream_is_capturing(side, &capturing) == cudaSuccess);
  CHECK_FALSE(capturing);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);
  REQUIRE(sim.stream_is_capturing(side, &capturing) == cudaSuccess);
  CHECK(capturing);
  CaptureInfo of_origin, of_side;
  REQUIRE(sim.stream_capture_info(origin, &of_origin) == cudaSuccess);
  REQUIRE(sim.stream_capture_info(side, &of_side) == cudaSuccess);
  CHECK(of_side.status == cudaStreamCaptureStatusActive);
  CHECK(of_side.id == of_origin.id);
  CHECK(of_side.graph == of_origin.graph);
  CHECK(sim.begin_capture(side, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);  // captures already
  sim.launch(side, [&] { trace.push_back(2); });
  sim.delay(side, 1ms);
  REQUIRE(sim.event_record(join, side) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  sim.launch(origin, [&] { trace.push_back(3); });
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(origin, &graph) == cudaSuccess);
  CHECK(graph == of_origin.graph);
  // Both streams left the capture; nothing ran, and records and waits were
  // graph edges, not stream work.
  REQUIRE(sim.stream_is_capturing(side, &capturing) == cudaSuccess);
  CHECK_FALSE(capturing);
  REQUIRE(sim.stream_synchronize(side) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(origin) == cudaSuccess);
  CHECK(trace.empty());
  CHECK(sim.counters().events_recorded == before.events_recorded);
  CHECK(sim.counters().stream_waits == before.stream_waits);

  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, side) == cudaSuccess);  // on any stream
  REQUIRE(sim.stream_synchronize(side) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, origin) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(origin) == cudaSuccess);
  CHECK(trace == std::vector<int>{1, 2, 3, 1, 2, 3});
  // Recorded again outside capture, the events are ordinary ones.
  REQUIRE(sim.event_record(join, side) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  CHECK(sim.event_synchronize(join) == cudaSuccess);
  sim.graph_exec_destroy(exec);
  sim.graph_destroy(graph);
  sim.event_destroy(fork);
  sim.event_destroy(join);
}

TEST_CASE("sim capture: a launch runs a graph's branches at once, each node after its dependencies",
          "[sim][capture]") {
  SimDriver sim;
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  cudaStream_t launch_on = sim.create_stream();
  EventHandle fork = nullptr, join = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.event_create(&join) == cudaSuccess);
  // Each branch's node waits (2 s at most) to see the other's started: only
  // branches run at once both see it.
  std::atomic<bool> side_started{false}, origin_started{false}, before_launch{false};
  std::atomic<int> saw_other{0}, saw_before{0}, saw_side_done{0};
  std::atomic<bool> side_done{false};
  auto wait_for = [](const std::atomic<bool>& flag) {
    for (int i = 0; i < 2000 && !flag.load(); ++i) std::this_thread::sleep_for(1ms);
    return flag.load();
  };
  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);
  sim.launch(side, [&] {
    if (before_launch.load()) saw_before.fetch_add(1);  // after the launch stream's earlier work
    side_started = true;
    if (wait_for(origin_started)) saw_other.fetch_add(1);
  });
  sim.launch(side, [&] { side_done = true; });
  sim.launch(origin, [&] {
    origin_started = true;
    if (wait_for(side_started)) saw_other.fetch_add(1);
  });
  REQUIRE(sim.event_record(join, side) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  sim.launch(origin, [&] {
    if (side_done.load()) saw_side_done.fetch_add(1);  // after the join
  });
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(origin, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);

  sim.delay(launch_on, 20ms);
  sim.launch(launch_on, [&] { before_launch = true; });
  REQUIRE(sim.graph_launch(exec, launch_on) == cudaSuccess);
  std::atomic<bool> after{false};
  sim.launch(launch_on, [&] { after = side_done.load(); });  // after every branch
  REQUIRE(sim.stream_synchronize(launch_on) == cudaSuccess);
  CHECK(saw_before == 1);
  CHECK(saw_other == 2);
  CHECK(saw_side_done == 1);
  CHECK(after);
  sim.graph_exec_destroy(exec);  // its lane goes with it; the launch is done
  sim.graph_destroy(graph);
  sim.event_destroy(fork);
  sim.event_destroy(join);
}

TEST_CASE("sim capture: end fails with cudaErrorStreamCaptureUnjoined when a forked stream is not joined back",
          "[sim][capture]") {
  SimDriver sim;
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  EventHandle fork = nullptr, join = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.event_create(&join) == cudaSuccess);
  Released released;
  std::atomic<int> ran{0};
  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(origin, &info) == cudaSuccess);
  REQUIRE(sim.graph_on_release(info.graph, &Released::callback, &released) == cudaSuccess);
  sim.launch(origin, [&] { ran.fetch_add(1); });
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);
  cudaError_t expected = cudaErrorStreamCaptureUnjoined;
  SECTION("work on the forked stream, never waited on") { sim.launch(side, [&] { ran.fetch_add(1); }); }
  SECTION("work on the forked stream after its join") {
    sim.launch(side, [&] { ran.fetch_add(1); });
    REQUIRE(sim.event_record(join, side) == cudaSuccess);
    REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
    sim.launch(side, [&] { ran.fetch_add(1); });
  }
  SECTION("a join recorded before the forked stream's last work") {
    REQUIRE(sim.event_record(join, side) == cudaSuccess);
    sim.launch(side, [&] { ran.fetch_add(1); });
    REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  }
  SECTION("a forked stream with no work of its own needs no join") { expected = cudaSuccess; }
  SECTION("a forked stream joined through another forked stream") {
    cudaStream_t third = sim.create_stream();
    EventHandle relay = nullptr;
    REQUIRE(sim.event_create(&relay) == cudaSuccess);
    sim.launch(side, [&] { ran.fetch_add(1); });
    REQUIRE(sim.event_record(join, side) == cudaSuccess);
    REQUIRE(sim.stream_wait_event(third, join) == cudaSuccess);  // joins the capture, after side's work
    sim.launch(third, [&] { ran.fetch_add(1); });
    REQUIRE(sim.event_record(relay, third) == cudaSuccess);
    REQUIRE(sim.stream_wait_event(origin, relay) == cudaSuccess);
    expected = cudaSuccess;
    sim.event_destroy(relay);
  }
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x1);
  CHECK(sim.end_capture(origin, &graph) == expected);
  bool capturing = true;
  REQUIRE(sim.stream_is_capturing(side, &capturing) == cudaSuccess);
  CHECK_FALSE(capturing);  // out of capture either way
  REQUIRE(sim.stream_is_capturing(origin, &capturing) == cudaSuccess);
  CHECK_FALSE(capturing);
  if (expected == cudaSuccess) {
    CHECK(graph != nullptr);
    CHECK(released.calls == 0);
    sim.graph_destroy(graph);
  } else {
    CHECK(graph == nullptr);
    CHECK(sim.live_graphs() == 0);
  }
  CHECK(released.calls == 1);
  REQUIRE(sim.stream_synchronize(side) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(origin) == cudaSuccess);
  CHECK(ran == 0);  // captured work never runs outside a launch
  sim.event_destroy(fork);
  sim.event_destroy(join);
}

TEST_CASE("sim capture: waits that cross a capture's boundary are refused and invalidate it", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  EventHandle event = nullptr;
  REQUIRE(sim.event_create(&event) == cudaSuccess);
  auto status_of = [&](cudaStream_t stream) {
    CaptureInfo info;
    REQUIRE(sim.stream_capture_info(stream, &info) == cudaSuccess);
    return info.status;
  };
  auto finish = [&](cudaStream_t stream) {
    cudaGraph_t g = nullptr;
    const cudaError_t e = sim.end_capture(stream, &g);
    if (g != nullptr) sim.graph_destroy(g);
    return e;
  };
  SECTION("a capturing stream waits on an event recorded outside capture") {
    REQUIRE(sim.event_record(event, side) == cudaSuccess);
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(sim.stream_wait_event(origin, event) == cudaErrorStreamCaptureIsolation);
    CHECK(status_of(origin) == cudaStreamCaptureStatusInvalidated);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("... but an event never recorded is empty work") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    CHECK(sim.stream_wait_event(origin, event) == cudaSuccess);
    CHECK(status_of(origin) == cudaStreamCaptureStatusActive);
    CHECK(finish(origin) == cudaSuccess);
  }
  SECTION("a stream of one capture waits on an event of another") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.begin_capture(side, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    CHECK(sim.stream_wait_event(side, event) == cudaErrorStreamCaptureMerge);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
    CHECK(finish(side) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("a captured event is queried or synchronized") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    CHECK(sim.event_query(event) == cudaErrorCapturedEvent);
    CHECK(sim.event_synchronize(event) == cudaErrorCapturedEvent);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("end is called on a forked stream") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    REQUIRE(sim.stream_wait_event(side, event) == cudaSuccess);
    CHECK(finish(side) == cudaErrorStreamCaptureUnmatched);
    CHECK(status_of(side) == cudaStreamCaptureStatusInvalidated);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("a forked stream is queried, synchronized, or asked its id") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    REQUIRE(sim.stream_wait_event(side, event) == cudaSuccess);
    unsigned long long id = 0;
    CHECK(sim.stream_query(side) == cudaErrorStreamCaptureUnsupported);
    CHECK(sim.stream_synchronize(side) == cudaErrorStreamCaptureUnsupported);
    CHECK(sim.stream_id(side, &id) == cudaErrorStreamCaptureUnsupported);
    CHECK(status_of(origin) == cudaStreamCaptureStatusInvalidated);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("an invalidated capture is not joined, and its streams' waits fail") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    CHECK(sim.stream_query(origin) == cudaErrorStreamCaptureUnsupported);  // invalidates
    CHECK(sim.stream_wait_event(side, event) == cudaErrorInvalidValue);
    CHECK(status_of(side) == cudaStreamCaptureStatusNone);
    CHECK(sim.stream_wait_event(origin, event) == cudaErrorStreamCaptureInvalidated);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("the legacy stream cannot join") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    CHECK(sim.stream_wait_event(cudaStreamLegacy, event) == cudaErrorStreamCaptureImplicit);
    CHECK(finish(origin) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("an event recorded in a capture that is over") {
    REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);
    CHECK(finish(origin) == cudaSuccess);
    CHECK(sim.stream_wait_event(side, event) == cudaErrorCapturedEvent);
    CHECK(sim.event_query(event) == cudaErrorCapturedEvent);
    REQUIRE(sim.event_record(event, origin) == cudaSuccess);  // outside capture: ordinary again
    CHECK(sim.stream_wait_event(side, event) == cudaSuccess);
    CHECK(sim.event_synchronize(event) == cudaSuccess);
  }
  CHECK(status_of(origin) == cudaStreamCaptureStatusNone);
  CHECK(status_of(side) == cudaStreamCaptureStatusNone);
  CHECK(sim.live_graphs() == 0);
  REQUIRE(sim.stream_synchronize(origin) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(side) == cudaSuccess);
  sim.event_destroy(event);
}

TEST_CASE("sim capture: unsafe calls follow the runtime's capture-mode rules", "[sim][capture]") {
  SimConfig config;
  config.relax_vmm_calls = false;  // VMM calls are "potentially unsafe", as raw cuMemCreate is
  SimDriver sim(config);
  cudaStream_t s = sim.create_stream();
  PhysicalHandle h = 0;

  auto status_of = [&](cudaStream_t stream) {
    CaptureInfo info;
    REQUIRE(sim.stream_capture_info(stream, &info) == cudaSuccess);
    return info.status;
  };
  auto finish = [&](cudaStream_t stream) {
    cudaGraph_t g = nullptr;
    const cudaError_t e = sim.end_capture(stream, &g);
    if (g != nullptr) sim.graph_destroy(g);
    return e;
  };

  SECTION("global capture: an unsafe call from the capturing thread invalidates it") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(sim.physical_create(0, kG, &h) == cudaErrorStreamCaptureUnsupported);
    CHECK(sim.counters().physical_creates == 0);  // nothing done
    CHECK(status_of(s) == cudaStreamCaptureStatusInvalidated);
    CHECK(finish(s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("global capture: ... and from another thread in global mode") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    cudaError_t other = cudaSuccess;
    std::thread([&] { other = sim.physical_create(0, kG, &h); }).join();
    CHECK(other == cudaErrorStreamCaptureUnsupported);
    CHECK(finish(s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("global capture: a thread in relaxed mode may make it, and the capture stays valid") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    {
      ScopedMode relaxed(sim, cudaStreamCaptureModeRelaxed);
      REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
      REQUIRE(sim.physical_release(h) == cudaSuccess);
    }
    cudaError_t other = cudaErrorUnknown;
    std::thread([&] {
      ScopedMode relaxed(sim, cudaStreamCaptureModeRelaxed);
      PhysicalHandle mine = 0;
      other = sim.physical_create(0, kG, &mine);
      if (other == cudaSuccess) sim.physical_release(mine);
    }).join();
    CHECK(other == cudaSuccess);
    CHECK(status_of(s) == cudaStreamCaptureStatusActive);
    CHECK(finish(s) == cudaSuccess);
  }
  SECTION("thread-local capture: other threads in global mode are not prohibited") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    cudaError_t other = cudaErrorUnknown;
    std::thread([&] {
      PhysicalHandle mine = 0;
      other = sim.physical_create(0, kG, &mine);
      if (other == cudaSuccess) sim.physical_release(mine);
    }).join();
    CHECK(other == cudaSuccess);
    CHECK(status_of(s) == cudaStreamCaptureStatusActive);
    CHECK(sim.physical_create(0, kG, &h) == cudaErrorStreamCaptureUnsupported);  // but this thread is
    CHECK(finish(s) == cudaErrorStreamCaptureInvalidated);
  }
  SECTION("relaxed capture: nothing is prohibited") {
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
    REQUIRE(sim.physical_release(h) == cudaSuccess);
    CHECK(finish(s) == cudaSuccess);
  }
  // No capture: nothing is prohibited.
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
  REQUIRE(sim.physical_release(h) == cudaSuccess);
}

TEST_CASE("sim capture: the driver's VMM calls are relaxed by default", "[sim][capture]") {
  SimDriver sim;  // relax_vmm_calls: as the CUDA driver
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  PhysicalHandle h = 0;
  REQUIRE(sim.physical_create(0, kG, &h) == cudaSuccess);
  REQUIRE(sim.physical_release(h) == cudaSuccess);
  cudaGraph_t g = nullptr;
  REQUIRE(sim.end_capture(s, &g) == cudaSuccess);
  sim.graph_destroy(g);
}

TEST_CASE("sim capture: release callbacks run once the graph, its executables and launches are gone",
          "[sim][capture]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  Released released;
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  REQUIRE(sim.graph_on_release(info.graph, &Released::callback, &released) == cudaSuccess);
  CHECK(sim.graph_on_release(reinterpret_cast<cudaGraph_t>(0x10), &Released::callback, &released) ==
        cudaErrorInvalidValue);
  sim.delay(s, 100ms);  // a long graph: its launch is still running when the handles go
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  cudaGraphExec_t e1 = nullptr, e2 = nullptr;
  REQUIRE(sim.graph_instantiate(&e1, graph) == cudaSuccess);
  REQUIRE(sim.graph_instantiate(&e2, graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  CHECK(released.calls == 0);  // executables remain
  REQUIRE(sim.graph_exec_destroy(e1) == cudaSuccess);
  CHECK(released.calls == 0);
  REQUIRE(sim.graph_launch(e2, s) == cudaSuccess);
  REQUIRE(sim.graph_exec_destroy(e2) == cudaSuccess);
  CHECK(released.calls == 0);  // the launch is still running
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(released.calls == 1);
}

TEST_CASE("sim capture: an invalidated capture's callbacks run at EndCapture", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  Released released;
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  REQUIRE(sim.graph_on_release(info.graph, &Released::callback, &released) == cudaSuccess);
  CHECK(sim.stream_query(s) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  CHECK(sim.end_capture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(released.calls == 1);
}

TEST_CASE("sim capture: the thread's capture mode is exchanged", "[sim][capture]") {
  SimDriver sim;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  REQUIRE(sim.exchange_capture_mode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeGlobal);  // a thread starts in global mode
  mode = cudaStreamCaptureModeGlobal;
  REQUIRE(sim.exchange_capture_mode(&mode) == cudaSuccess);
  CHECK(mode == cudaStreamCaptureModeRelaxed);
  mode = static_cast<cudaStreamCaptureMode>(42);
  CHECK(sim.exchange_capture_mode(&mode) == cudaErrorInvalidValue);
}

TEST_CASE("sim: pool-owned streams are created and destroyed through the Driver", "[sim][capture]") {
  SimDriver sim;
  cudaStream_t s = nullptr;
  REQUIRE(sim.stream_create(0, &s) == cudaSuccess);
  std::atomic<bool> ran{false};
  sim.launch(s, [&] { ran = true; });
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(ran);
  CHECK(sim.stream_create(3, &s) == cudaErrorInvalidDevice);
  CHECK(sim.stream_destroy(s) == cudaSuccess);
}
