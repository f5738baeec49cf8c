// sova sim — stream capture and graphs (semantics in sim_graphs.hpp).
#include "sim_graphs.hpp"

#include "sim_streams.hpp"

#include "base/raw_enum.hpp"

#include <algorithm>
#include <optional>
#include <utility>

namespace sova::sim {

namespace {

// Graph and executable handles: fake pointers, never dereferenced, never
// reused within a simulation.
constexpr std::uintptr_t kHandleBase = 0x6a0000000000;
constexpr std::uintptr_t kHandleStride = 16;

std::atomic<unsigned long long> g_next_capture_id{1};

}  // namespace

cudaStreamCaptureMode& thread_capture_mode() noexcept {
  thread_local cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  return mode;
}

/// A user object: its destructor is the release callback.
struct SimGraphs::UserObject {
  GraphReleaseCallback callback;
  void* context;
  ~UserObject() { callback(context); }
};

/// Nodes are indices into the body's nodes.
using NodeSet = std::vector<std::size_t>;

/// What a graph or an executable holds: its nodes, in capture order, with
/// their dependencies and branches, and its references to user objects.
struct SimGraphs::Body {
  std::vector<Item> nodes;
  std::vector<NodeSet> deps;        // per node: the nodes it depends on
  std::vector<std::size_t> branch;  // per node: the capture's stream that recorded it (0: the origin)
  std::size_t branches = 1;         // streams of the capture
  int device = 0;
  std::vector<cudaStream_t> lanes;  // an executable's: where branches 1.. run at launch
  std::vector<std::shared_ptr<UserObject>> objects;
};

struct SimGraphs::Capture {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  int device = 0;
  bool invalidated = false;
  std::uintptr_t graph = 0;  // handle of the graph being built (in graphs_)
  BodyPtr body;
  unsigned long long origin = 0;  // id of the stream begin was called on
  /// Per stream of the capture (the origin and those that joined): the
  /// nodes its next node will depend on, and its branch number.
  std::map<unsigned long long, NodeSet> tails;
  std::map<unsigned long long, std::size_t> branches;
};

/// An event last recorded on a capturing stream: that stream's tail then.
/// Weak: the capture's end must not wait for the event's destruction.
struct SimGraphs::CapturedEvent {
  std::weak_ptr<Capture> capture;
  NodeSet nodes;
};

SimGraphs::SimGraphs(std::shared_ptr<SimStreams> streams) : streams_(std::move(streams)) {}

SimGraphs::~SimGraphs() {
  // Release what the tables hold outside the lock: callbacks may run.
  std::map<unsigned long long, std::shared_ptr<Capture>> captures;
  std::map<std::uintptr_t, BodyPtr> graphs;
  std::map<std::uintptr_t, BodyPtr> execs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    captures.swap(captures_);
    graphs.swap(graphs_);
    execs.swap(execs_);
  }
  for (auto& [handle, body] : execs) {
    for (cudaStream_t lane : body->lanes) streams_->destroy(lane);  // fails harmlessly after shutdown
  }
}

std::shared_ptr<SimGraphs::Capture> SimGraphs::capture_of(unsigned long long stream_id) {
  auto it = captures_.find(stream_id);
  return it == captures_.end() ? nullptr : it->second;
}

void SimGraphs::invalidate_locked(Capture& c) {
  if (c.invalidated) return;
  c.invalidated = true;
  c.body->nodes.clear();  // nothing of it will ever run
  c.body->deps.clear();
  c.body->branch.clear();
}

bool SimGraphs::joined_locked(const Capture& c) {
  const std::vector<NodeSet>& deps = c.body->deps;
  std::vector<bool> reached(deps.size(), false);
  auto origin = c.tails.find(c.origin);
  NodeSet todo = origin == c.tails.end() ? NodeSet{} : origin->second;
  while (!todo.empty()) {
    const std::size_t node = todo.back();
    todo.pop_back();
    if (reached[node]) continue;
    reached[node] = true;
    todo.insert(todo.end(), deps[node].begin(), deps[node].end());
  }
  for (const auto& [sid, tail] : c.tails) {
    for (std::size_t node : tail) {
      if (!reached[node]) return false;
    }
  }
  return true;
}

cudaError_t SimGraphs::begin(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (!valid_capture_mode(detail::raw_enum(mode))) return cudaErrorInvalidValue;
  if (stream == nullptr || stream == cudaStreamLegacy) return cudaErrorStreamCaptureUnsupported;
  unsigned long long sid = 0;
  int device = 0;
  if (cudaError_t e = streams_->id(stream, &sid); e != cudaSuccess) return e;
  if (cudaError_t e = streams_->device_of(stream, &device); e != cudaSuccess) return e;
  auto c = std::make_shared<Capture>();
  c->id = g_next_capture_id.fetch_add(1);
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->device = device;
  c->body = std::make_shared<Body>();
  c->body->device = device;
  c->origin = sid;
  c->tails[sid];
  c->branches[sid] = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (captures_.count(sid) != 0) return cudaErrorIllegalState;  // already capturing (or joined)
  c->graph = kHandleBase + kHandleStride * ++next_handle_;
  graphs_.emplace(c->graph, c->body);
  captures_.emplace(sid, c);
  capturing_.fetch_add(1);
  return cudaSuccess;
}

cudaError_t SimGraphs::end(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  unsigned long long sid = 0;
  if (cudaError_t e = streams_->id(stream, &sid); e != cudaSuccess) return e;
  BodyPtr dropped;  // released outside the lock
  std::unique_lock<std::mutex> lock(mu_);
  auto it = captures_.find(sid);
  if (it == captures_.end()) return cudaErrorIllegalState;  // not capturing
  std::shared_ptr<Capture> c = it->second;
  if (sid != c->origin) {
    invalidate_locked(*c);
    return cudaErrorStreamCaptureUnmatched;  // a joined stream: the origin ends the capture
  }
  if (c->thread != std::this_thread::get_id() && c->mode != cudaStreamCaptureModeRelaxed) {
    return cudaErrorStreamCaptureWrongThread;
  }
  // Every stream of the capture leaves it.
  for (const auto& [member, tail] : c->tails) {
    if (captures_.erase(member) != 0) capturing_.fetch_sub(1);
  }
  const cudaError_t result = c->invalidated       ? cudaErrorStreamCaptureInvalidated
                             : !joined_locked(*c) ? cudaErrorStreamCaptureUnjoined
                                                  : cudaSuccess;
  if (result != cudaSuccess) {
    auto g = graphs_.find(c->graph);
    dropped = std::move(g->second);
    graphs_.erase(g);
    *graph = nullptr;
    lock.unlock();
    dropped.reset();  // user objects of a failed capture are released now
    return result;
  }
  *graph = reinterpret_cast<cudaGraph_t>(c->graph);
  return cudaSuccess;
}

cudaError_t SimGraphs::info(cudaStream_t stream, CaptureInfo* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  unsigned long long sid = 0;
  if (cudaError_t e = streams_->id(stream, &sid); e != cudaSuccess) return e;
  *out = CaptureInfo{};
  if (capturing_.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Capture> c = capture_of(sid);
  if (c == nullptr) return cudaSuccess;
  out->id = c->id;
  if (c->invalidated) {
    out->status = cudaStreamCaptureStatusInvalidated;
  } else {
    out->status = cudaStreamCaptureStatusActive;
    out->graph = reinterpret_cast<cudaGraph_t>(c->graph);
  }
  return cudaSuccess;
}

bool SimGraphs::capture_item(cudaStream_t stream, Item& item) {
  if (capturing_.load() == 0) return false;
  unsigned long long sid = 0;
  if (streams_->id(stream, &sid) != cudaSuccess) return false;  // submit reports the bad handle
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Capture> c = capture_of(sid);
  if (c == nullptr) return false;
  if (c->invalidated) return true;
  NodeSet& tail = c->tails[sid];
  Body& body = *c->body;
  body.deps.push_back(tail);
  body.branch.push_back(c->branches[sid]);
  tail.assign(1, body.nodes.size());
  body.nodes.push_back(Item{{}, item.delay, std::move(item.work)});
  return true;
}

bool SimGraphs::record_event(cudaStream_t stream, EventHandle event) {
  if (capturing_.load() == 0 && captured_events_count_.load() == 0) return false;
  unsigned long long sid = 0;
  if (streams_->id(stream, &sid) != cudaSuccess) return false;  // the caller checked the handle
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Capture> c = capture_of(sid);
  if (c == nullptr) {
    captured_events_.erase(event);  // recorded outside capture: an ordinary event again
    captured_events_count_.store(captured_events_.size());
    return false;
  }
  captured_events_[event] = CapturedEvent{c, c->tails[sid]};
  captured_events_count_.store(captured_events_.size());
  return true;
}

bool SimGraphs::wait_event(cudaStream_t stream, EventHandle event, bool recorded, cudaError_t* result) {
  if (capturing_.load() == 0 && captured_events_count_.load() == 0) return false;
  unsigned long long sid = 0;
  if (streams_->id(stream, &sid) != cudaSuccess) return false;  // the caller reports the bad handle
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Capture> mine = capture_of(sid);
  if (mine != nullptr && mine->invalidated) {
    *result = cudaErrorStreamCaptureInvalidated;  // the waiter's capture is invalidated already
    return true;
  }
  auto captured = captured_events_.find(event);
  if (captured == captured_events_.end()) {
    if (mine == nullptr) return false;  // an ordinary wait
    if (!recorded) {
      *result = cudaSuccess;  // an event never recorded is empty work
      return true;
    }
    invalidate_locked(*mine);
    *result = cudaErrorStreamCaptureIsolation;  // a dependency on work outside the capture
    return true;
  }
  std::shared_ptr<Capture> theirs = captured->second.capture.lock();
  if (theirs == nullptr || capture_of(theirs->origin) != theirs) {
    if (mine != nullptr) invalidate_locked(*mine);
    *result = cudaErrorCapturedEvent;  // its capture is over
    return true;
  }
  if (mine != nullptr && mine != theirs) {
    invalidate_locked(*mine);
    invalidate_locked(*theirs);
    *result = cudaErrorStreamCaptureMerge;
    return true;
  }
  if (mine == nullptr && theirs->invalidated) {
    *result = cudaErrorInvalidValue;  // nothing to join
    return true;
  }
  if (mine == nullptr && (stream == nullptr || stream == cudaStreamLegacy)) {
    invalidate_locked(*theirs);
    *result = cudaErrorStreamCaptureImplicit;
    return true;
  }
  NodeSet& tail = theirs->tails[sid];  // a new member starts with no dependency
  for (std::size_t node : captured->second.nodes) {
    if (std::find(tail.begin(), tail.end(), node) == tail.end()) tail.push_back(node);
  }
  if (mine == nullptr) {
    captures_.emplace(sid, theirs);  // the stream joins the capture
    capturing_.fetch_add(1);
    if (theirs->branches.emplace(sid, theirs->body->branches).second) ++theirs->body->branches;
  }
  *result = cudaSuccess;
  return true;
}

cudaError_t SimGraphs::event_use(EventHandle event) {
  if (captured_events_count_.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  auto captured = captured_events_.find(event);
  if (captured == captured_events_.end()) return cudaSuccess;
  if (std::shared_ptr<Capture> c = captured->second.capture.lock()) invalidate_locked(*c);
  return cudaErrorCapturedEvent;
}

void SimGraphs::forget_event(EventHandle event) {
  if (captured_events_count_.load() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  captured_events_.erase(event);
  captured_events_count_.store(captured_events_.size());
}

cudaError_t SimGraphs::conflicting_use(cudaStream_t stream) {
  if (capturing_.load() == 0) return cudaSuccess;
  unsigned long long sid = 0;
  if (streams_->id(stream, &sid) != cudaSuccess) return cudaSuccess;  // the caller reports the bad handle
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Capture> c = capture_of(sid);
  if (c == nullptr) return cudaSuccess;
  invalidate_locked(*c);
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t SimGraphs::device_synchronize_allowed(int device) {
  if (capturing_.load() == 0) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  cudaError_t result = cudaSuccess;
  for (auto& [sid, c] : captures_) {
    if (c->device != device) continue;
    invalidate_locked(*c);
    result = cudaErrorStreamCaptureUnsupported;
  }
  return result;
}

cudaError_t SimGraphs::unsafe_call() {
  if (capturing_.load() == 0) return cudaSuccess;
  const cudaStreamCaptureMode mine = thread_capture_mode();
  if (mine == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const std::thread::id me = std::this_thread::get_id();
  std::lock_guard<std::mutex> lock(mu_);
  cudaError_t result = cudaSuccess;
  for (auto& [sid, c] : captures_) {
    const bool own = c->thread == me && c->mode != cudaStreamCaptureModeRelaxed;
    const bool other_global =
        mine == cudaStreamCaptureModeGlobal && c->thread != me && c->mode == cudaStreamCaptureModeGlobal;
    if (!own && !other_global) continue;
    invalidate_locked(*c);
    result = cudaErrorStreamCaptureUnsupported;
  }
  return result;
}

cudaError_t SimGraphs::instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  auto body = std::make_shared<Body>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = graphs_.find(reinterpret_cast<std::uintptr_t>(graph));
    if (it == graphs_.end()) return cudaErrorInvalidValue;
    for (auto& [sid, c] : captures_) {
      if (c->graph == it->first) return cudaErrorInvalidValue;  // still being captured
    }
    const Body& source = *it->second;
    body->objects = source.objects;  // an executable keeps the graph's user objects alive
    body->nodes.reserve(source.nodes.size());
    for (const Item& node : source.nodes) body->nodes.push_back(Item{{}, node.delay, node.work});
    body->deps = source.deps;
    body->device = source.device;
    // Branches with nodes, numbered again from 1 (0: the origin, which runs
    // on the launch stream): each runs on a lane of its own.
    std::vector<std::size_t> renumbered(source.branches, 0);
    body->branches = 1;
    body->branch.reserve(source.branch.size());
    for (std::size_t b : source.branch) {
      if (b != 0 && renumbered[b] == 0) renumbered[b] = body->branches++;
      body->branch.push_back(renumbered[b]);
    }
  }
  // Lanes: streams of the simulation, made outside the lock.
  for (std::size_t lane = 1; lane < body->branches; ++lane) {
    cudaStream_t made = streams_->create(body->device, false);
    if (made == nullptr) {
      for (cudaStream_t s : body->lanes) streams_->destroy(s);
      return cudaErrorInvalidResourceHandle;  // after shutdown
    }
    body->lanes.push_back(made);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::uintptr_t handle = kHandleBase + kHandleStride * ++next_handle_;
  execs_.emplace(handle, std::move(body));
  *exec = reinterpret_cast<cudaGraphExec_t>(handle);
  return cudaSuccess;
}

cudaError_t SimGraphs::launch(cudaGraphExec_t exec, cudaStream_t stream) {
  BodyPtr body;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(reinterpret_cast<std::uintptr_t>(exec));
    if (it == execs_.end()) return cudaErrorInvalidResourceHandle;
    body = it->second;
  }
  if (cudaError_t e = conflicting_use(stream); e != cudaSuccess) return e;  // no launch into a capture here
  // Each item holds the body: the user objects live until the last runs.
  auto node_item = [&body](std::size_t i) {
    Item item;
    item.delay = body->nodes[i].delay;
    item.work = [body, i] {
      if (body->nodes[i].work) body->nodes[i].work();
    };
    return item;
  };
  if (body->lanes.empty()) {
    // One branch: its nodes in order on the launch stream. An empty graph
    // still orders the stream: one marker item.
    if (body->nodes.empty()) return streams_->submit(stream, Item{{}, {}, [body] {}});
    for (std::size_t i = 0; i < body->nodes.size(); ++i) {
      if (cudaError_t e = streams_->submit(stream, node_item(i)); e != cudaSuccess) return e;
    }
    return cudaSuccess;
  }
  // Several branches: the origin's nodes on the launch stream, each other
  // branch's on its lane, after the launch stream's earlier work; a node
  // waits for the nodes of other branches it depends on (those of its own
  // branch precede it on its stream); the launch stream's later work waits
  // for every branch.
  Point start;
  if (cudaError_t e = streams_->submit(stream, Item{}, &start); e != cudaSuccess) return e;
  std::vector<Point> at(body->nodes.size());
  std::vector<std::optional<Point>> last(body->branches);
  for (std::size_t i = 0; i < body->nodes.size(); ++i) {
    const std::size_t branch = body->branch[i];
    Item item = node_item(i);
    if (branch != 0 && !last[branch]) item.waits.push_back(start);
    for (std::size_t dep : body->deps[i]) {
      if (body->branch[dep] != branch) item.waits.push_back(at[dep]);
    }
    cudaStream_t target = branch == 0 ? stream : body->lanes[branch - 1];
    if (cudaError_t e = streams_->submit(target, std::move(item), &at[i]); e != cudaSuccess) return e;
    last[branch] = at[i];
  }
  Item join;
  for (std::size_t branch = 1; branch < body->branches; ++branch) {
    if (last[branch]) join.waits.push_back(*last[branch]);
  }
  return streams_->submit(stream, std::move(join));
}

cudaError_t SimGraphs::destroy_graph(cudaGraph_t graph) {
  BodyPtr dropped;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = graphs_.find(reinterpret_cast<std::uintptr_t>(graph));
  if (it == graphs_.end()) return cudaErrorInvalidValue;
  for (auto& [sid, c] : captures_) {
    if (c->graph == it->first) return cudaErrorIllegalState;  // still being captured
  }
  dropped = std::move(it->second);
  graphs_.erase(it);
  lock.unlock();
  dropped.reset();  // may run release callbacks: not under the lock
  return cudaSuccess;
}

cudaError_t SimGraphs::destroy_exec(cudaGraphExec_t exec) {
  BodyPtr dropped;
  std::unique_lock<std::mutex> lock(mu_);
  auto it = execs_.find(reinterpret_cast<std::uintptr_t>(exec));
  if (it == execs_.end()) return cudaErrorInvalidResourceHandle;
  dropped = std::move(it->second);
  execs_.erase(it);
  lock.unlock();
  for (cudaStream_t lane : dropped->lanes) streams_->destroy(lane);  // queued launches still run
  dropped.reset();
  return cudaSuccess;
}

cudaError_t SimGraphs::retain_release_callback(cudaGraph_t graph, GraphReleaseCallback callback, void* context) {
  if (callback == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(reinterpret_cast<std::uintptr_t>(graph));
  if (it == graphs_.end()) return cudaErrorInvalidValue;  // nothing made: the callback never runs
  it->second->objects.reserve(it->second->objects.size() + 1);
  it->second->objects.push_back(std::shared_ptr<UserObject>(new UserObject{callback, context}));
  return cudaSuccess;
}

std::size_t SimGraphs::live_graphs() {
  std::lock_guard<std::mutex> lock(mu_);
  return graphs_.size();
}

std::size_t SimGraphs::live_execs() {
  std::lock_guard<std::mutex> lock(mu_);
  return execs_.size();
}

}  // namespace sova::sim
