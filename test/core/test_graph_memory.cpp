// GraphMemory (lib/core/graph_memory.hpp) on its own: the graph-memory-node
// rules with a recording block source and the simulation's capture model.
#include "support/catch.hpp"

#include "core/graph_memory.hpp"

#include <sova/sim.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

using namespace sova;
using namespace sova::detail;

namespace {

/// Hands out malloc'ed blocks and records what comes back.
class RecordingSource final : public GraphBlockSource {
 public:
  ~RecordingSource() override {
    for (void* p : out_) std::free(p);
  }
  cudaError_t take(std::size_t bytes, void** out) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_next_) {
      fail_next_ = false;
      return cudaErrorMemoryAllocation;
    }
    void* p = std::malloc(bytes);
    out_.insert(p);
    ++takes_;
    *out = p;
    return cudaSuccess;
  }
  void give_back(const std::vector<void*>& blocks) noexcept override {
    wait_at_gate();
    std::lock_guard<std::mutex> lock(mu_);
    for (void* p : blocks) {
      given_back_.push_back(p);
      out_.erase(p);
      std::free(p);
    }
  }
  /// Counted with give_back's (given_back()), and on its own (freed_on()).
  /// The tests pass the freeing stream as the pool's token.
  void give_back_freed_on(void* block, void* freer) noexcept override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      freed_on_.emplace_back(block, static_cast<cudaStream_t>(freer));
    }
    give_back(std::vector<void*>{block});
  }
  /// The size a reused block serves now, by block (requested()).
  void requested(void* block, std::size_t bytes) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    requested_[block] = bytes;
  }
  void fail_next() { fail_next_ = true; }
  /// give_back waits, once inside it, until open_gate().
  void close_gate() { gate_closed_.store(true); }
  void open_gate() { gate_closed_.store(false); }
  bool waiting_at_gate() const { return at_gate_.load(); }
  std::vector<std::pair<void*, cudaStream_t>> freed_on() {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_on_;
  }
  std::size_t given_back_now() {
    std::lock_guard<std::mutex> lock(mu_);
    return given_back_.size();
  }
  std::size_t takes() const { return takes_; }
  std::size_t outstanding() const { return out_.size(); }
  std::size_t given_back() const { return given_back_.size(); }

 private:
  void wait_at_gate() noexcept {
    if (!gate_closed_.load()) return;
    at_gate_.store(true);
    while (gate_closed_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    at_gate_.store(false);
  }

  std::mutex mu_;
  std::atomic<bool> gate_closed_{false};
  std::atomic<bool> at_gate_{false};
  std::vector<std::pair<void*, cudaStream_t>> freed_on_;
  std::map<void*, std::size_t> requested_;
  bool fail_next_ = false;
  std::size_t takes_ = 0;
  std::set<void*> out_;
  std::vector<void*> given_back_;
};

struct Capture {
  SimDriver& sim;
  cudaStream_t stream;
  Capture(SimDriver& s, cudaStream_t st, cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal)
      : sim(s), stream(st) {
    REQUIRE(sim.begin_capture(stream, mode) == cudaSuccess);
  }
  cudaGraph_t end() {
    cudaGraph_t g = nullptr;
    REQUIRE(sim.end_capture(stream, &g) == cudaSuccess);
    return g;
  }
};

}  // namespace

TEST_CASE("graph memory: an allocation outside capture is refused", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(graphs.allocate(&p, 256, s) == cudaErrorStreamCaptureUnsupported);
  CHECK(p == nullptr);
  CHECK(source.takes() == 0);
  cudaError_t result = cudaSuccess;
  CHECK_FALSE(graphs.deallocate(&result, s, s, &result));  // not graph memory
}

TEST_CASE("graph memory: blocks are held by the graph until it and its executables are gone", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  Capture capture(sim, s);
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(graphs.allocate(&a, 1000, s) == cudaSuccess);
  REQUIRE(graphs.allocate(&b, 3000, s) == cudaSuccess);
  CHECK(a != b);
  CHECK(graphs.stats().held_bytes == 4000);
  CHECK(graphs.stats().graphs == 1);
  CHECK(graphs.capture_in_progress());
  cudaGraph_t graph = capture.end();
  // Not known ended until something shows it (the stream is never queried on its own).
  CHECK(graphs.capture_in_progress());
  graphs.outside_capture(s);  // the pool's allocate saw s outside capture
  CHECK_FALSE(graphs.capture_in_progress());

  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  CHECK_FALSE(graphs.has_released());  // the executable holds it
  // Freed after the capture: accepted once, final for the caller; the memory stays.
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(a, s, s, &result));
  CHECK(result == cudaSuccess);
  REQUIRE(graphs.deallocate(a, s, s, &result));
  CHECK(result == cudaErrorInvalidValue);
  CHECK(graphs.stats().held_bytes == 4000);
  CHECK(source.given_back() == 0);

  REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(graphs.has_released());
  graphs.collect();
  // `a` (freed by the caller) goes back; `b` (never freed) stays allocated:
  // the caller's still, as a cudaMallocAsync block outlives its graph.
  CHECK(source.given_back() == 1);
  CHECK(source.outstanding() == 1);
  const GraphMemoryStats stats = graphs.stats();
  CHECK(stats.held_bytes == 0);
  CHECK(stats.held_bytes_high == 4000);
  CHECK(stats.graphs == 0);
  CHECK(stats.released_graphs == 1);
  // Released: the pointers are not graph memory any more (the pool judges
  // them: b's free is an ordinary free of a live block, a's a double free).
  CHECK_FALSE(graphs.deallocate(b, s, s, &result));
  CHECK_FALSE(graphs.deallocate(a, s, s, &result));
  graphs.reset_high();
  CHECK(graphs.stats().held_bytes_high == 0);
}

TEST_CASE("graph memory: a free in the capture makes the block reusable by later allocations on that stream",
          "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  Capture capture(sim, s);
  void* a = nullptr;
  REQUIRE(graphs.allocate(&a, 4096, s) == cudaSuccess);
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(a, s, s, &result));
  REQUIRE(result == cudaSuccess);
  REQUIRE(graphs.deallocate(a, s, s, &result));
  CHECK(result == cudaErrorInvalidValue);  // freed twice in the capture
  void* big = nullptr;
  REQUIRE(graphs.allocate(&big, 8192, s) == cudaSuccess);  // does not fit: new memory
  CHECK(big != a);
  void* small = nullptr;
  REQUIRE(graphs.allocate(&small, 100, s) == cudaSuccess);  // fits: reused
  CHECK(small == a);
  CHECK(source.takes() == 2);
  CHECK(graphs.stats().held_bytes == 4096 + 8192);
  cudaGraph_t graph = capture.end();
  // Another capture does not see this one's freed blocks.
  REQUIRE(graphs.deallocate(small, s, s, &result));
  Capture second(sim, s);
  void* c = nullptr;
  REQUIRE(graphs.allocate(&c, 100, s) == cudaSuccess);
  CHECK(c != a);
  CHECK(graphs.stats().graphs == 2);
  cudaGraph_t graph2 = second.end();
  CHECK(graphs.capture_in_progress());         // the first capture ended (a second began on s); the second?
  REQUIRE(graphs.deallocate(c, s, s, &result));  // the caller's free after its capture
  REQUIRE(sim.graph_destroy(graph2) == cudaSuccess);  // out of order: the second first
  graphs.collect();
  CHECK(source.given_back() == 1);
  CHECK_FALSE(graphs.capture_in_progress());  // its graph is released: over
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  graphs.collect();
  // a (freed, reused as `small`, freed after the capture) comes back; `big`,
  // never freed, stays the caller's.
  CHECK(source.given_back() == 2);
  CHECK(source.outstanding() == 1);
  CHECK(graphs.stats().held_bytes == 0);
}

TEST_CASE("graph memory: a failed allocation changes nothing and leaves the capture valid", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  Capture capture(sim, s);
  source.fail_next();
  void* p = reinterpret_cast<void*>(0x1);
  CHECK(graphs.allocate(&p, 64, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  CHECK(graphs.stats().held_bytes == 0);
  CaptureInfo info;
  REQUIRE(sim.stream_capture_info(s, &info) == cudaSuccess);
  CHECK(info.status == cudaStreamCaptureStatusActive);
  REQUIRE(graphs.allocate(&p, 64, s) == cudaSuccess);
  cudaGraph_t graph = capture.end();
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(p, s, s, &result));
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  graphs.collect();
  CHECK(source.outstanding() == 0);
}

TEST_CASE("graph memory: an invalidated capture is reported, and its graph's blocks come back", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = nullptr;
  REQUIRE(graphs.allocate(&p, 64, s) == cudaSuccess);
  REQUIRE(sim.stream_query(s) == cudaErrorStreamCaptureUnsupported);  // invalidates
  void* q = nullptr;
  CHECK(graphs.allocate(&q, 64, s) == cudaErrorStreamCaptureInvalidated);
  CHECK(q == nullptr);
  cudaError_t result = cudaSuccess;
  REQUIRE(graphs.deallocate(p, s, s, &result));
  CHECK(result == cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = nullptr;
  CHECK(sim.end_capture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  // The failed capture's graph is gone; what it handed out is the caller's
  // until freed, as after any capture (unwinding code frees it).
  REQUIRE(graphs.deallocate(p, s, s, &result));
  CHECK(result == cudaSuccess);
  graphs.collect();
  CHECK(source.given_back() == 1);
  CHECK(source.outstanding() == 0);
}

TEST_CASE("graph memory: a graph released after its GraphMemory is gone touches nothing", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  cudaStream_t s = sim.create_stream();
  cudaGraph_t graph = nullptr;
  {
    GraphMemory graphs(sim, source);
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    void* p = nullptr;
    REQUIRE(graphs.allocate(&p, 64, s) == cudaSuccess);
    REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  }
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);  // the callback finds an orphaned inbox
  CHECK(source.given_back() == 0);
}

TEST_CASE("graph memory: in a capture forked over several streams, a free is reusable on its own stream only",
          "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  EventHandle fork = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  Capture capture(sim, origin);
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);  // side joins the capture
  void* a = nullptr;
  REQUIRE(graphs.allocate(&a, 4096, side) == cudaSuccess);  // the capture's first allocation
  void* b = nullptr;
  REQUIRE(graphs.allocate(&b, 4096, origin) == cudaSuccess);
  CHECK(graphs.stats().graphs == 1);  // one capture, one graph, whatever the stream
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(a, side, side, &result));
  REQUIRE(result == cudaSuccess);
  REQUIRE(graphs.deallocate(b, side, side, &result));  // allocated on the origin, freed on side
  REQUIRE(result == cudaSuccess);
  // The origin's later allocations do not follow side's frees: new memory.
  void* c = nullptr;
  REQUIRE(graphs.allocate(&c, 4096, origin) == cudaSuccess);
  CHECK((c != a && c != b));
  // side's do: its two frees come back, and then new memory.
  std::set<void*> on_side;
  for (int i = 0; i < 3; ++i) {
    void* p = nullptr;
    REQUIRE(graphs.allocate(&p, 4096, side) == cudaSuccess);
    on_side.insert(p);
  }
  CHECK(on_side.count(a) == 1);
  CHECK(on_side.count(b) == 1);
  CHECK(on_side.count(c) == 0);
  CHECK(source.takes() == 4);

  cudaGraph_t graph = capture.end();
  // The stream of the first allocation is the one watched: the origin seen
  // outside capture does not end it, side does.
  CHECK(graphs.capture_in_progress());
  graphs.outside_capture(origin);
  CHECK(graphs.capture_in_progress());
  graphs.outside_capture(side);
  CHECK_FALSE(graphs.capture_in_progress());
  for (void* p : on_side) REQUIRE(graphs.deallocate(p, side, side, &result));  // the caller's frees
  REQUIRE(graphs.deallocate(c, origin, origin, &result));
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  graphs.collect();
  CHECK(source.given_back() == 4);
  CHECK(source.outstanding() == 0);
  sim.event_destroy(fork);
}

TEST_CASE("graph memory: a statistics read after a release waits for another thread's collect of it", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  Capture capture(sim, s);
  void* p = nullptr;
  REQUIRE(graphs.allocate(&p, 4096, s) == cudaSuccess);
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(p, s, s, &result));  // freed in the graph: back at the release
  cudaGraph_t graph = capture.end();
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(graphs.has_released());

  // One thread's collect stops inside give_back; another thread's read of
  // the statistics must not return before that collect is done.
  source.close_gate();
  std::thread collector([&] { graphs.collect(); });
  while (!source.waiting_at_gate()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::atomic<bool> read_done{false};
  std::size_t back_when_read = 0;
  std::thread reader([&] {
    graphs.stats();
    back_when_read = source.given_back_now();
    read_done.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(read_done.load());
  source.open_gate();
  collector.join();
  reader.join();
  CHECK(back_when_read == 1);
  CHECK_FALSE(graphs.has_released());
}

TEST_CASE("graph memory: the caller's free outside capture goes back as a free on its stream", "[graphs]") {
  SimDriver sim;
  RecordingSource source;
  GraphMemory graphs(sim, source);
  cudaStream_t s = sim.create_stream();
  cudaStream_t user = sim.create_stream();
  Capture capture(sim, s);
  void* p = nullptr;
  REQUIRE(graphs.allocate(&p, 4096, s) == cudaSuccess);
  cudaGraph_t graph = capture.end();
  cudaError_t result = cudaErrorUnknown;
  REQUIRE(graphs.deallocate(p, user, user, &result));
  REQUIRE(result == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  graphs.collect();
  const auto freed_on = source.freed_on();
  REQUIRE(freed_on.size() == 1);
  CHECK(freed_on[0].first == p);
  CHECK(freed_on[0].second == user);
  CHECK(source.outstanding() == 0);
}
