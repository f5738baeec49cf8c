// Scenario tests of "Which graph holds what" (docs/graphs.md): Pool::
// graph_memory_snapshot() on the simulation, written from the documentation
// only (docs/graphs.md, include/sova/graphs.hpp, pool.hpp, sim.hpp).
//
// The randomized scenario keeps a model of what the docs promise, block by
// block, and checks the pool against it after every step:
//  * the snapshot lists exactly the graphs that allocated and are not yet
//    released, in order of capture id ("A graph whose memory went back to the
//    pool is no longer listed");
//  * each entry's held bytes/blocks are what its capture allocated (a block
//    freed in the capture and reused later on the same stream counted once:
//    "a graph holds its peak, not its sum") plus the outputs of other graphs
//    whose caller's free it captured; its outputs are the blocks allocated in
//    it and not freed in it (graphs.hpp, GraphHolding);
//  * graph_memory_stats() and PoolStats agree: a block two graphs hold is
//    counted once in the totals;
//  * `capturing` is true from the capture's first allocation until a pool call
//    on the stream of that allocation finds it outside the capture ("Limits",
//    "Device synchronizes wait");
//  * nothing else of the pool moves: invariants hold, the live blocks and used
//    bytes are what the model says (graph blocks are live blocks of the pool
//    until released, counted in used_current), a snapshot changes no figure.
// Sizes are whole MiB above the default policy's size classes, so a block's
// bytes are the requested bytes whichever of the two a figure counts. Seeds
// are fixed; a failure names its seed and step.
//
// Then the odd moments, one test case each: a pool without graphs, captures
// that allocate nothing, a snapshot from another thread during a global
// capture, an invalidated capture, the `capturing` flag across the end of a
// forked capture and a new capture on its stream, two captures open at once,
// an output freed inside another graph's capture, a capture that only frees
// another graph's output, an unjoined fork, and an ordinary free on the
// watched stream (which fails on this tree: `capturing` stays true).
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <future>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::string describe(const GraphMemorySnapshot& snapshot) {
  std::ostringstream out;
  out << "[";
  for (const GraphHolding& h : snapshot)
    out << " {id " << h.capture_id << " capturing " << h.capturing << " held " << h.held_bytes << "B/" << h.held_blocks
        << " out " << h.output_bytes << "B/" << h.output_blocks << "}";
  out << " ]";
  return out.str();
}

bool same(const GraphHolding& a, const GraphHolding& b, bool check_capturing = true) {
  return a.capture_id == b.capture_id && (!check_capturing || a.capturing == b.capturing) &&
         a.held_bytes == b.held_bytes && a.held_blocks == b.held_blocks && a.output_bytes == b.output_bytes &&
         a.output_blocks == b.output_blocks;
}

const GraphHolding* entry_of(const GraphMemorySnapshot& snapshot, unsigned long long id) {
  for (const GraphHolding& h : snapshot)
    if (h.capture_id == id) return &h;
  return nullptr;
}

// ---------------------------------------------------------------------------
// The model of the randomized scenario.

struct Blk {
  std::uintptr_t p = 0;
  std::size_t bytes = 0;
  int graph = -1;                       // the graph that allocated it; -1: an eager block
  cudaStream_t alloc_stream = nullptr;  // where (last) allocated
  bool occupied = true;                 // allocated and not freed in its graph
  cudaStream_t freed_on = nullptr;      // freed in its graph: on which stream
  bool caller_freed = false;            // the caller's free, outside its graph, was made
  std::set<int> holders;                // unreleased graphs holding it
  bool live = true;                     // a live block of the pool (not back)
};

struct Gm {
  unsigned long long id = 0;
  bool listed = false;  // allocated: has an entry until released
  bool open = false;    // capture in progress
  bool invalidated = false;
  int capturing = 1;  // expected flag: 1, 0, or -1 where the docs leave it open
  cudaStream_t watched = nullptr;
  std::vector<cudaStream_t> streams;
  cudaGraph_t graph = nullptr;
  bool graph_alive = false;
  std::vector<cudaGraphExec_t> execs;
  bool launched = false;
  bool released = false;
};

// What a run of the scenario went through, so that the test can tell it
// exercised each kind of step (a model checked on nothing proves nothing).
struct Coverage {
  std::size_t captures = 0, listed = 0, forked = 0, reused = 0, post_join_frees = 0, invalidated = 0,
              empty_captures = 0, frees_in_capture = 0, cross_graph_frees = 0, refused_frees = 0,
              outputs_freed_outside = 0, double_frees = 0, launches = 0, pending_launch_releases = 0, releases = 0,
              seen_over = 0;
  void add(const Coverage& o) {
    captures += o.captures;
    listed += o.listed;
    forked += o.forked;
    reused += o.reused;
    post_join_frees += o.post_join_frees;
    invalidated += o.invalidated;
    empty_captures += o.empty_captures;
    frees_in_capture += o.frees_in_capture;
    cross_graph_frees += o.cross_graph_frees;
    refused_frees += o.refused_frees;
    outputs_freed_outside += o.outputs_freed_outside;
    double_frees += o.double_frees;
    launches += o.launches;
    pending_launch_releases += o.pending_launch_releases;
    releases += o.releases;
    seen_over += o.seen_over;
  }
};

SimConfig scenario_sim() {
  SimConfig config;
  config.total_memory = std::size_t{1} << 30;
  return config;
}

class Scenario {
 public:
  explicit Scenario(std::uint32_t seed) : seed_(seed), rng_(seed), sim_(scenario_sim()), pool_(options_on(sim_)) {
    for (int i = 0; i < 4; ++i) capture_streams_.push_back(sim_.create_stream());
    eager_ = sim_.create_stream();
    launch_ = sim_.create_stream();
    REQUIRE(sim_.event_create(&fork_event_) == cudaSuccess);
    for (int i = 0; i < 3; ++i) {
      EventHandle e = nullptr;
      REQUIRE(sim_.event_create(&e) == cudaSuccess);
      join_events_.push_back(e);
    }
  }

  const Coverage& coverage() const { return cov_; }

  void run(int steps) {
    check("start");
    for (int i = 0; i < steps; ++i) {
      step_no_ = i;
      one_step();
    }
    finish();
  }

 private:
  // ---- randomness ---------------------------------------------------------
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  T pick_of(const std::vector<T>& v) {
    return v[pick(v.size())];
  }

  // ---- the model's figures ------------------------------------------------
  std::vector<GraphHolding> expected_snapshot() const {
    std::vector<GraphHolding> out;
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      const Gm& gm = graphs_[g];
      if (!gm.listed || gm.released) continue;
      GraphHolding h;
      h.capture_id = gm.id;
      h.capturing = gm.capturing == 1;
      for (const Blk& b : blocks_) {
        if (!b.live || b.holders.count(static_cast<int>(g)) == 0) continue;
        h.held_bytes += b.bytes;
        h.held_blocks += 1;
        if (b.graph == static_cast<int>(g) && b.occupied) {
          h.output_bytes += b.bytes;
          h.output_blocks += 1;
        }
      }
      out.push_back(h);
    }
    std::sort(out.begin(), out.end(),
              [](const GraphHolding& a, const GraphHolding& b) { return a.capture_id < b.capture_id; });
    return out;
  }

  GraphMemoryStats expected_totals() const {
    GraphMemoryStats t;
    for (const Blk& b : blocks_) {
      if (!b.live || b.holders.empty()) continue;
      t.held_bytes += b.bytes;
      t.held_blocks += 1;
    }
    for (const Gm& gm : graphs_) {
      if (!gm.listed) continue;
      if (gm.released)
        t.released_graphs += 1;
      else
        t.graphs += 1;
    }
    return t;
  }

  // ---- the check after every step -----------------------------------------
  void check(const std::string& what) {
    INFO("seed " << seed_ << ", step " << step_no_ << ": " << what);
    const std::size_t syncs_before = sim_.counters().device_synchronizes;
    // The snapshot first: a released graph must not be listed even when the
    // snapshot is the first call after the release (sova.h: "released graphs
    // are collected first").
    const GraphMemorySnapshot snap = pool_.graph_memory_snapshot();
    const GraphMemoryStats totals = pool_.graph_memory_stats();
    const PoolStats stats = pool_.stats();
    const GraphMemorySnapshot again = pool_.graph_memory_snapshot();
    const PoolStats stats_again = pool_.stats();

    const std::vector<GraphHolding> want = expected_snapshot();
    INFO("snapshot " << describe(snap));
    INFO("expected " << describe(want));
    REQUIRE(snap.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("entry " << i);
      CHECK(snap[i].capture_id == want[i].capture_id);
      CHECK(snap[i].held_bytes == want[i].held_bytes);
      CHECK(snap[i].held_blocks == want[i].held_blocks);
      CHECK(snap[i].output_bytes == want[i].output_bytes);
      CHECK(snap[i].output_blocks == want[i].output_blocks);
      CHECK(snap[i].output_bytes <= snap[i].held_bytes);
      CHECK(snap[i].output_blocks <= snap[i].held_blocks);
      const Gm* gm = graph_by_id(want[i].capture_id);
      REQUIRE(gm != nullptr);
      if (gm->open) CHECK(snap[i].capturing);  // a capture in progress is always "may still be"
      if (gm->capturing != -1) CHECK(snap[i].capturing == want[i].capturing);
      if (i > 0) CHECK(snap[i - 1].capture_id < snap[i].capture_id);
    }
    // A second snapshot with nothing done in between is the same.
    REQUIRE(again.size() == snap.size());
    for (std::size_t i = 0; i < snap.size(); ++i) CHECK(same(again[i], snap[i]));

    // The totals: every held block once, however many graphs hold it.
    const GraphMemoryStats want_totals = expected_totals();
    CHECK(totals.held_bytes == want_totals.held_bytes);
    CHECK(totals.held_blocks == want_totals.held_blocks);
    CHECK(totals.graphs == want_totals.graphs);
    CHECK(totals.released_graphs == want_totals.released_graphs);
    high_ = std::max<std::uint64_t>(high_, want_totals.held_bytes);
    CHECK(totals.held_bytes_high == high_);
    CHECK(totals.graphs == snap.size());
    // The snapshot's sums: a block held by k graphs appears in k entries.
    std::uint64_t sum_bytes = 0, sum_blocks = 0, want_sum_bytes = 0, want_sum_blocks = 0;
    for (const GraphHolding& h : snap) {
      sum_bytes += h.held_bytes;
      sum_blocks += h.held_blocks;
    }
    for (const Blk& b : blocks_) {
      if (!b.live) continue;
      want_sum_bytes += b.bytes * b.holders.size();
      want_sum_blocks += b.holders.size();
    }
    CHECK(sum_bytes == want_sum_bytes);
    CHECK(sum_blocks == want_sum_blocks);
    CHECK(sum_bytes >= totals.held_bytes);

    // PoolStats carries the same totals, and the pool's own figures are the
    // model's: graph blocks are live blocks of the pool until released.
    CHECK(stats.graph_held_bytes == totals.held_bytes);
    CHECK(stats.graph_held_blocks == totals.held_blocks);
    CHECK(stats.graphs == totals.graphs);
    std::uint64_t live_blocks = 0, live_bytes = 0;
    for (const Blk& b : blocks_) {
      if (!b.live) continue;
      live_blocks += 1;
      live_bytes += b.bytes;
    }
    CHECK(stats.live_blocks == live_blocks);
    CHECK(stats.used_current == live_bytes);
    CHECK(stats.reserved_current >= stats.used_current);
    // Reading changed nothing.
    CHECK(stats_again.live_blocks == stats.live_blocks);
    CHECK(stats_again.used_current == stats.used_current);
    CHECK(stats_again.allocations == stats.allocations);
    CHECK(stats_again.deallocations == stats.deallocations);
    CHECK(stats_again.failed_allocations == stats.failed_allocations);
    CHECK(stats_again.graph_held_bytes == stats.graph_held_bytes);
    pool_.check_invariants();

    // An open capture survives the reads, which synchronize no device.
    if (open_ >= 0) {
      const Gm& gm = graphs_[static_cast<std::size_t>(open_)];
      const CaptureInfo info = capture_info(sim_, gm.streams.front());
      CHECK(info.id == gm.id);
      CHECK(info.status == (gm.invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive));
      CHECK(sim_.counters().device_synchronizes == syncs_before);
    }
  }

  const Gm* graph_by_id(unsigned long long id) const {
    for (const Gm& gm : graphs_)
      if (gm.id == id) return &gm;
    return nullptr;
  }

  // ---- model updates --------------------------------------------------------
  // A pool call on `stream`, outside any capture or inside capture `inside`:
  // every other ended capture whose first allocation was on `stream` is seen
  // to be over ("once an allocation or free of the pool on the stream it
  // allocated on finds that stream outside it"; a stream capturing a later
  // capture is outside the earlier one). An allocation or a free, of a block
  // a graph holds or of an ordinary one (the test case "an ordinary free on
  // the watched stream" below), does so; a refused call may stop before
  // looking: left unchecked here, so that the scenario goes on checking the
  // rest.
  enum class Call { allocation, free_of_graph_block, ordinary_free, refused };
  void pool_call_on(cudaStream_t stream, Call call, int inside = -1) {
    for (std::size_t g = 0; g < graphs_.size(); ++g) {
      Gm& gm = graphs_[g];
      if (static_cast<int>(g) == inside || !gm.listed || gm.released || gm.open || gm.watched != stream) continue;
      if (call != Call::refused) {
        if (gm.capturing == 1) ++cov_.seen_over;
        gm.capturing = 0;
      } else if (gm.capturing == 1) {
        gm.capturing = -1;
      }
    }
  }

  void no_overlap(std::uintptr_t p, std::size_t bytes, const char* what) {
    INFO("seed " << seed_ << ", step " << step_no_ << ": " << what);
    for (const Blk& b : blocks_) {
      if (!b.live) continue;
      const bool overlaps = p < b.p + b.bytes && b.p < p + bytes;
      INFO("new block " << p << " +" << bytes << " against live block " << b.p << " +" << b.bytes << " of graph "
                        << b.graph << " (holders " << b.holders.size() << ")");
      REQUIRE_FALSE(overlaps);
    }
  }

  void release(int g) {
    Gm& gm = graphs_[static_cast<std::size_t>(g)];
    if (gm.released) return;
    gm.released = true;
    if (gm.listed) ++cov_.releases;
    gm.open = false;
    for (Blk& b : blocks_) {
      if (!b.live || b.holders.erase(g) == 0) continue;
      // Once no graph holds it: an output nobody freed stays the caller's
      // ("stays allocated, an ordinary block of the pool"); the rest is back.
      if (b.holders.empty()) b.live = b.occupied && !b.caller_freed;
    }
  }

  // ---- eager work -------------------------------------------------------------
  void eager_allocate(cudaStream_t stream, bool inside_capture) {
    const std::size_t bytes = (1 + pick(3)) * kMiB;
    void* p = nullptr;
    REQUIRE(pool_.try_allocate(&p, bytes, stream) == cudaSuccess);
    REQUIRE(p != nullptr);
    // "Eager work during a capture ... never receives memory a graph holds."
    no_overlap(reinterpret_cast<std::uintptr_t>(p), bytes, "eager allocation");
    Blk b;
    b.p = reinterpret_cast<std::uintptr_t>(p);
    b.bytes = bytes;
    b.alloc_stream = stream;
    blocks_.push_back(b);
    pool_call_on(stream, Call::allocation, inside_capture ? open_ : -1);
  }

  bool eager_free(cudaStream_t stream, bool inside_capture) {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i)
      if (blocks_[i].live && blocks_[i].graph == -1) candidates.push_back(i);
    if (candidates.empty()) return false;
    Blk& b = blocks_[pick_of(candidates)];
    REQUIRE(pool_.try_deallocate(reinterpret_cast<void*>(b.p), stream) == cudaSuccess);
    b.live = false;
    pool_call_on(stream, Call::ordinary_free, inside_capture ? open_ : -1);
    return true;
  }

  cudaStream_t idle_stream() {
    std::vector<cudaStream_t> all = capture_streams_;
    all.push_back(eager_);
    return pick_of(all);
  }

  // ---- the caller's free of a graph's output, outside capture -------------
  bool free_output_outside() {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.graph >= 0 && b.occupied && !b.caller_freed) candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    Blk& b = blocks_[pick_of(candidates)];
    const cudaStream_t stream = idle_stream();
    REQUIRE(pool_.try_deallocate(reinterpret_cast<void*>(b.p), stream) == cudaSuccess);
    b.caller_freed = true;
    // Held by a graph: its memory stays with the graph; else (its graph was
    // released) an ordinary free.
    const bool held = !b.holders.empty();
    if (!held) b.live = false;
    pool_call_on(stream, held ? Call::free_of_graph_block : Call::ordinary_free);
    ++cov_.outputs_freed_outside;
    check("caller's free of an output outside capture");
    return true;
  }

  // A second free of an output the caller freed while a graph still holds it
  // (so its address cannot have been handed out again): cudaErrorInvalidValue,
  // nothing changes. On the eager stream, which no capture watches.
  bool double_free() {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.graph >= 0 && b.caller_freed) candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    const Blk& b = blocks_[pick_of(candidates)];
    CHECK(pool_.try_deallocate(reinterpret_cast<void*>(b.p), eager_) == cudaErrorInvalidValue);
    ++cov_.double_frees;
    check("a second free of an output");
    return true;
  }

  // ---- a capture ---------------------------------------------------------------
  void capture() {
    const int h = static_cast<int>(graphs_.size());
    graphs_.emplace_back();
    std::vector<cudaStream_t> order = capture_streams_;
    std::shuffle(order.begin(), order.end(), rng_);
    const std::size_t sides = pick(3);
    const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                           cudaStreamCaptureModeRelaxed};
    const cudaStreamCaptureMode mode = modes[pick(3)];
    const cudaStream_t origin = order[0];
    REQUIRE(sim_.begin_capture(origin, mode) == cudaSuccess);
    {
      Gm& gm = graphs_.back();
      gm.open = true;
      gm.id = capture_info(sim_, origin).id;
      REQUIRE(gm.id != 0);
      for (std::size_t g = 0; g + 1 < graphs_.size(); ++g) REQUIRE(graphs_[g].id != gm.id);  // unique
      gm.streams.push_back(origin);
    }
    open_ = h;
    ++cov_.captures;
    if (sides > 0) ++cov_.forked;
    check("capture begun, nothing allocated: no entry yet");
    if (sides > 0) {
      REQUIRE(sim_.event_record(fork_event_, origin) == cudaSuccess);
      for (std::size_t i = 1; i <= sides; ++i) {
        REQUIRE(sim_.stream_wait_event(order[i], fork_event_) == cudaSuccess);
        REQUIRE(capture_info(sim_, order[i]).id == graphs_.back().id);
        graphs_.back().streams.push_back(order[i]);
      }
    }
    const std::size_t ops = pick(9);
    for (std::size_t i = 0; i < ops; ++i) {
      const std::vector<cudaStream_t> streams = graphs_[static_cast<std::size_t>(h)].streams;
      const cudaStream_t x = pick_of(streams);
      const std::size_t op = pick(20);
      if (op < 10) {
        allocate_in_capture(h, x, false);
      } else if (op < 14) {
        if (!free_own_in_capture(h, x, x)) allocate_in_capture(h, x, false);
      } else if (op < 16) {
        if (!free_other_output_in_capture(h, x)) allocate_in_capture(h, x, false);
      } else if (op < 17) {
        refused_free_in_capture(h, x);
      } else if (op < 19) {
        eager_allocate(eager_, true);
        check("eager allocation beside a capture");
      } else {
        if (eager_free(eager_, true)) check("eager free beside a capture");
      }
    }
    if (sides > 0) {
      for (std::size_t i = 1; i <= sides; ++i) {
        REQUIRE(sim_.event_record(join_events_[i - 1], order[i]) == cudaSuccess);
        REQUIRE(sim_.stream_wait_event(origin, join_events_[i - 1]) == cudaSuccess);
      }
      // After the join, a side's block freed on the origin reaches the
      // origin's later allocations ("A free on the origin after a join").
      if (coin(0.5)) {
        for (std::size_t i = 1; i <= sides; ++i)
          if (coin(0.7) && free_own_in_capture(h, order[i], origin)) ++cov_.post_join_frees;
        if (coin(0.7)) allocate_in_capture(h, origin, true);
      }
    }
    // Sometimes the capture is invalidated (a query of the capturing stream
    // conflicts with it): an allocation then fails, and the capture's graph is
    // released at its end.
    Gm* gm = &graphs_[static_cast<std::size_t>(h)];
    if (gm->listed)
      ++cov_.listed;
    else
      ++cov_.empty_captures;
    if (coin(0.12)) {
      CHECK(sim_.stream_query(origin) == cudaErrorStreamCaptureUnsupported);
      gm->invalidated = true;
      ++cov_.invalidated;
      check("capture invalidated");
      void* p = reinterpret_cast<void*>(0x1);
      CHECK(pool_.try_allocate(&p, kMiB, origin) == cudaErrorStreamCaptureInvalidated);
      CHECK(p == nullptr);
      pool_call_on(origin, Call::refused, h);
      check("allocation on an invalidated capture refused");
    }
    cudaGraph_t graph = nullptr;
    if (gm->invalidated) {
      CHECK(sim_.end_capture(origin, &graph) == cudaErrorStreamCaptureInvalidated);
      CHECK(graph == nullptr);
      open_ = -1;
      gm->open = false;
      release(h);  // "A capture that was invalidated releases its graph at cudaStreamEndCapture"
      check("invalidated capture ended: its graph released");
      return;
    }
    REQUIRE(sim_.end_capture(origin, &graph) == cudaSuccess);
    REQUIRE(graph != nullptr);
    open_ = -1;
    gm->open = false;
    gm->graph = graph;
    gm->graph_alive = true;
    check(gm->listed ? "capture ended: capturing until a call on its stream sees it over"
                     : "capture ended without allocating: no entry");
    if (gm->listed && coin(0.3)) {
      // A pool call on the stream of the first allocation, outside capture:
      // the capture is seen to be over.
      const cudaStream_t w = gm->watched;
      if (coin(0.5)) {
        eager_allocate(w, false);
      } else if (!eager_free(w, false)) {
        eager_allocate(w, false);
      }
      check("a pool call on the watched stream after the capture");
    }
  }

  // An allocation of capture `h` on stream `x`: either the exact size of the
  // smallest block the capture freed on `x` (reused: "smallest fit first"), or
  // more than all of them together (new memory, held by the graph).
  void allocate_in_capture(int h, cudaStream_t x, bool want_reuse) {
    std::vector<std::size_t> available;
    std::size_t available_bytes = 0;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.graph == h && !b.occupied && b.freed_on == x) {
        available.push_back(i);
        available_bytes += b.bytes;
      }
    }
    const bool reuse = !available.empty() && (want_reuse || coin(0.6));
    std::size_t bytes = 0;
    if (reuse) {
      bytes = blocks_[available[0]].bytes;
      for (std::size_t i : available) bytes = std::min(bytes, blocks_[i].bytes);
    } else {
      bytes = available_bytes + (1 + pick(4)) * kMiB;
    }
    void* p = nullptr;
    {
      INFO("seed " << seed_ << ", step " << step_no_ << ": allocation of " << bytes << " in capture " << h);
      REQUIRE(pool_.try_allocate(&p, bytes, x) == cudaSuccess);
      REQUIRE(p != nullptr);
    }
    const auto up = reinterpret_cast<std::uintptr_t>(p);
    Gm& gm = graphs_[static_cast<std::size_t>(h)];
    if (!gm.listed) {
      gm.listed = true;
      gm.watched = x;
      gm.capturing = 1;
    }
    pool_call_on(x, Call::allocation, h);
    if (reuse) {
      Blk* found = nullptr;
      for (std::size_t i : available)
        if (blocks_[i].p == up && blocks_[i].bytes == bytes) found = &blocks_[i];
      INFO("seed " << seed_ << ", step " << step_no_ << ": a block freed on this stream of the capture, " << bytes
                   << " bytes, is reused");
      REQUIRE(found != nullptr);
      found->occupied = true;
      found->freed_on = nullptr;
      found->alloc_stream = x;
      ++cov_.reused;
      check("allocation in capture reusing a block it freed on the same stream");
    } else {
      // New memory: no live block of any graph (the capture's own freed blocks
      // included, whatever stream freed them), nor an eager one.
      no_overlap(up, bytes, "allocation in capture");
      Blk b;
      b.p = up;
      b.bytes = bytes;
      b.graph = h;
      b.alloc_stream = x;
      b.holders.insert(h);
      blocks_.push_back(b);
      check("allocation in capture");
    }
  }

  // Capture `h` frees, on `on`, one of its outputs allocated on `allocated_on`.
  bool free_own_in_capture(int h, cudaStream_t allocated_on, cudaStream_t on) {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.graph == h && b.occupied && b.alloc_stream == allocated_on) candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    Blk& b = blocks_[pick_of(candidates)];
    REQUIRE(pool_.try_deallocate(reinterpret_cast<void*>(b.p), on) == cudaSuccess);
    b.occupied = false;
    b.freed_on = on;
    ++cov_.frees_in_capture;
    pool_call_on(on, Call::free_of_graph_block, h);
    check("free in the capture of a block it allocated: the graph keeps it, not an output");
    return true;
  }

  // Capture `h` (once it allocated) frees an output of an ended, unreleased
  // graph: accepted, final for the caller; `h` holds the block too.
  bool free_other_output_in_capture(int h, cudaStream_t x) {
    if (!graphs_[static_cast<std::size_t>(h)].listed) return false;
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.graph >= 0 && b.graph != h && b.occupied && !b.caller_freed && !b.holders.empty())
        candidates.push_back(i);
    }
    if (candidates.empty()) return false;
    Blk& b = blocks_[pick_of(candidates)];
    REQUIRE(pool_.try_deallocate(reinterpret_cast<void*>(b.p), x) == cudaSuccess);
    b.caller_freed = true;
    b.holders.insert(h);
    pool_call_on(x, Call::free_of_graph_block, h);
    ++cov_.cross_graph_frees;
    check("another graph's output freed in the capture: both graphs hold it, the totals count it once");
    return true;
  }

  // A free in the capture of a block allocated before it (eager, or the
  // output of a released graph, now the caller's): refused with
  // cudaErrorStreamCaptureUnsupported, nothing changes, the capture stays valid.
  void refused_free_in_capture(int h, cudaStream_t x) {
    std::vector<std::size_t> candidates;
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      const Blk& b = blocks_[i];
      if (b.live && b.holders.empty()) candidates.push_back(i);
    }
    if (candidates.empty()) return;
    const Blk& b = blocks_[pick_of(candidates)];
    CHECK(pool_.try_deallocate(reinterpret_cast<void*>(b.p), x) == cudaErrorStreamCaptureUnsupported);
    ++cov_.refused_frees;
    pool_call_on(x, Call::refused, h);
    check(b.graph >= 0 ? "free in a capture of a released graph's output refused"
                       : "free in a capture of an eager block refused");
  }

  // ---- graph handles -----------------------------------------------------------
  std::vector<int> graphs_where(bool (*pred)(const Gm&)) const {
    std::vector<int> out;
    for (std::size_t g = 0; g < graphs_.size(); ++g)
      if (pred(graphs_[g])) out.push_back(static_cast<int>(g));
    return out;
  }

  // Released once the graph and its executables are destroyed and the
  // launches done: on the simulation the callback has run by the time the
  // synchronize, or the last destroy, returns ("What waits for it").
  void settle(int g) {
    REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);
    Gm& gm = graphs_[static_cast<std::size_t>(g)];
    if (!gm.graph_alive && gm.execs.empty()) release(g);
  }

  bool instantiate() {
    const std::vector<int> c = graphs_where([](const Gm& gm) { return gm.graph_alive && gm.execs.size() < 2; });
    if (c.empty()) return false;
    Gm& gm = graphs_[static_cast<std::size_t>(pick_of(c))];
    cudaGraphExec_t exec = nullptr;
    REQUIRE(sim_.graph_instantiate(&exec, gm.graph) == cudaSuccess);
    gm.execs.push_back(exec);
    check("instantiated");
    return true;
  }

  bool launch() {
    const std::vector<int> c = graphs_where([](const Gm& gm) { return !gm.execs.empty(); });
    if (c.empty()) return false;
    Gm& gm = graphs_[static_cast<std::size_t>(pick_of(c))];
    const std::size_t n = 1 + pick(3);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sim_.graph_launch(pick_of(gm.execs), launch_) == cudaSuccess);
    gm.launched = true;
    cov_.launches += n;
    if (coin(0.5)) REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);
    check("launched: the graph keeps what it holds");
    return true;
  }

  bool destroy_graph() {
    const std::vector<int> c = graphs_where([](const Gm& gm) { return gm.graph_alive; });
    if (c.empty()) return false;
    const int g = pick_of(c);
    Gm& gm = graphs_[static_cast<std::size_t>(g)];
    if (coin(0.5)) REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);  // launches done first, or not
    REQUIRE(sim_.graph_destroy(gm.graph) == cudaSuccess);
    gm.graph_alive = false;
    settle(g);
    check(gm.released ? "graph destroyed, no executable left: released" : "graph destroyed, executables remain");
    return true;
  }

  bool destroy_exec() {
    const std::vector<int> c = graphs_where([](const Gm& gm) { return !gm.execs.empty(); });
    if (c.empty()) return false;
    const int g = pick_of(c);
    Gm& gm = graphs_[static_cast<std::size_t>(g)];
    const std::size_t which = pick(gm.execs.size());
    REQUIRE(sim_.graph_exec_destroy(gm.execs[which]) == cudaSuccess);
    gm.execs.erase(gm.execs.begin() + static_cast<std::ptrdiff_t>(which));
    settle(g);
    check(gm.released ? "last executable destroyed after the graph: released" : "executable destroyed");
    return true;
  }

  // A launch held back on its stream while every handle of the graph goes:
  // the graph is not released (its launch has not completed), so it stays
  // listed; once the launch runs, it is released.
  bool destroy_behind_running_launch() {
    const std::vector<int> c = graphs_where([](const Gm& gm) { return gm.graph_alive || !gm.execs.empty(); });
    if (c.empty()) return false;
    const int g = pick_of(c);
    Gm& gm = graphs_[static_cast<std::size_t>(g)];
    if (gm.execs.empty()) {
      cudaGraphExec_t exec = nullptr;
      REQUIRE(sim_.graph_instantiate(&exec, gm.graph) == cudaSuccess);
      gm.execs.push_back(exec);
    }
    std::promise<void> gate;
    std::shared_future<void> opened = gate.get_future().share();
    sim_.launch(launch_, [opened] { opened.wait(); });
    REQUIRE(sim_.graph_launch(gm.execs.front(), launch_) == cudaSuccess);
    gm.launched = true;
    if (gm.graph_alive) REQUIRE(sim_.graph_destroy(gm.graph) == cudaSuccess);
    gm.graph_alive = false;
    for (cudaGraphExec_t e : gm.execs) REQUIRE(sim_.graph_exec_destroy(e) == cudaSuccess);
    gm.execs.clear();
    check("every handle destroyed, a launch still pending: not released");
    gate.set_value();
    settle(g);
    if (gm.listed) ++cov_.pending_launch_releases;
    check("the pending launch done: released");
    return true;
  }

  // ---- the loop ----------------------------------------------------------------
  void one_step() {
    for (;;) {
      const std::size_t a = pick(100);
      if (a < 28) {
        capture();
        return;
      }
      if (a < 38) {
        if (instantiate()) return;
      } else if (a < 47) {
        if (launch()) return;
      } else if (a < 58) {
        if (destroy_graph()) return;
      } else if (a < 66) {
        if (destroy_exec()) return;
      } else if (a < 70) {
        if (destroy_behind_running_launch()) return;
      } else if (a < 82) {
        if (free_output_outside()) return;
      } else if (a < 85) {
        if (double_free()) return;
      } else if (a < 93) {
        eager_allocate(idle_stream(), false);
        check("eager allocation");
        return;
      } else {
        if (eager_free(idle_stream(), false)) {
          check("eager free");
          return;
        }
      }
    }
  }

  // Everything destroyed in a random order, then the caller's blocks freed:
  // everything goes back.
  void finish() {
    step_no_ = -1;
    std::vector<int> order;
    for (std::size_t g = 0; g < graphs_.size(); ++g) order.push_back(static_cast<int>(g));
    std::shuffle(order.begin(), order.end(), rng_);
    for (int g : order) {
      Gm& gm = graphs_[static_cast<std::size_t>(g)];
      if (gm.graph_alive && coin(0.5)) {
        REQUIRE(sim_.graph_destroy(gm.graph) == cudaSuccess);
        gm.graph_alive = false;
      }
      for (cudaGraphExec_t e : gm.execs) REQUIRE(sim_.graph_exec_destroy(e) == cudaSuccess);
      gm.execs.clear();
      if (gm.graph_alive) REQUIRE(sim_.graph_destroy(gm.graph) == cudaSuccess);
      gm.graph_alive = false;
      settle(g);
      check("finish: a graph destroyed");
    }
    for (Blk& b : blocks_) {
      if (!b.live) continue;
      REQUIRE(b.holders.empty());
      const cudaStream_t stream = idle_stream();
      REQUIRE(pool_.try_deallocate(reinterpret_cast<void*>(b.p), stream) == cudaSuccess);
      b.live = false;
    }
    check("finish: the caller's blocks freed");
    INFO("seed " << seed_);
    const GraphMemoryStats totals = pool_.graph_memory_stats();
    CHECK(totals.held_bytes == 0);
    CHECK(totals.held_blocks == 0);
    CHECK(totals.graphs == 0);
    CHECK(pool_.graph_memory_snapshot().empty());
    CHECK(pool_.stats().used_current == 0);
    CHECK(pool_.stats().live_blocks == 0);
    CHECK(sim_.live_graphs() == 0);
    CHECK(sim_.live_graph_execs() == 0);
    REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);
    for (EventHandle e : join_events_) sim_.event_destroy(e);
    sim_.event_destroy(fork_event_);
  }

  std::uint32_t seed_;
  std::mt19937 rng_;
  SimDriver sim_;
  Pool pool_;
  std::vector<cudaStream_t> capture_streams_;
  cudaStream_t eager_ = nullptr;
  cudaStream_t launch_ = nullptr;
  EventHandle fork_event_ = nullptr;
  std::vector<EventHandle> join_events_;
  std::vector<Blk> blocks_;
  std::vector<Gm> graphs_;
  int open_ = -1;
  int step_no_ = 0;
  Coverage cov_;
  std::uint64_t high_ = 0;
};

// A plain capture of `sizes` on `s`; returns its id.
unsigned long long capture_allocating(SimDriver& sim, Pool& pool, cudaStream_t s, const std::vector<std::size_t>& sizes,
                                      std::vector<void*>* out, cudaGraph_t* graph) {
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_info(sim, s).id;
  for (std::size_t bytes : sizes) out->push_back(pool.allocate(bytes, s));
  REQUIRE(sim.end_capture(s, graph) == cudaSuccess);
  return id;
}

}  // namespace

// ---------------------------------------------------------------------------

TEST_CASE("graph holdings scenario: random captures, frees and destroys against the documented model",
          "[graphs][scenario]") {
  // Fixed seeds: a failure names its seed and step (INFO).
  Coverage all;
  for (std::uint32_t seed : {20240601u, 7u, 99u, 1234u, 31337u, 4242u}) {
    INFO("seed " << seed);
    Scenario scenario(seed);
    scenario.run(60);
    all.add(scenario.coverage());
  }
  // Each kind of step happened at least once over the seeds.
  CHECK(all.captures > 0);
  CHECK(all.listed > 0);
  CHECK(all.forked > 0);
  CHECK(all.reused > 0);
  CHECK(all.post_join_frees > 0);
  CHECK(all.invalidated > 0);
  CHECK(all.empty_captures > 0);
  CHECK(all.frees_in_capture > 0);
  CHECK(all.cross_graph_frees > 0);
  CHECK(all.refused_frees > 0);
  CHECK(all.outputs_freed_outside > 0);
  CHECK(all.double_frees > 0);
  CHECK(all.launches > 0);
  CHECK(all.pending_launch_releases > 0);
  CHECK(all.releases == all.listed);  // every listed graph released by the end
  CHECK(all.seen_over > 0);
}

TEST_CASE("graph holdings scenario: a pool with no graphs lists nothing", "[graphs][scenario]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  CHECK(pool.graph_memory_snapshot().empty());
  cudaStream_t s = sim.create_stream();
  void* p = pool.allocate(3 * kMiB, s);  // eager memory is no graph's
  CHECK(pool.graph_memory_snapshot().empty());
  pool.deallocate(p, s);
  CHECK(pool.graph_memory_snapshot().empty());
  const GraphMemoryStats totals = pool.graph_memory_stats();
  CHECK(totals.held_bytes == 0);
  CHECK(totals.held_blocks == 0);
  CHECK(totals.graphs == 0);
  CHECK(totals.released_graphs == 0);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: captures that allocate nothing are not listed", "[graphs][scenario]") {
  // "one entry per capture that allocated": a capture with only work of its
  // own, with a refused free, or with eager allocations beside it has none.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  void* eager = pool.allocate(2 * kMiB, other);
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  sim.launch(s, [] {});
  CHECK(pool.graph_memory_snapshot().empty());
  // A free in capture of a block allocated before it: refused, changes nothing.
  CHECK(pool.try_deallocate(eager, s) == cudaErrorStreamCaptureUnsupported);
  void* beside = pool.allocate(kMiB, other);  // eager work beside the capture
  CHECK(pool.graph_memory_snapshot().empty());
  CHECK(capture_info(sim, s).status == cudaStreamCaptureStatusActive);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  CHECK(pool.graph_memory_stats().graphs == 0);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, other) == cudaSuccess);
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  const GraphMemoryStats totals = pool.graph_memory_stats();
  CHECK(totals.graphs == 0);
  CHECK(totals.released_graphs == 0);  // no graph of the pool's was ever there
  CHECK(pool.stats().live_blocks == 2);
  pool.deallocate(eager, other);
  pool.deallocate(beside, other);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: a snapshot from another thread during a global capture", "[graphs][scenario]") {
  // Another thread (in global mode, the default) reads the holdings while a
  // global capture allocates: it sees the capture as capturing, with what it
  // allocated so far, and the capture stays valid (sova's reads make no call
  // that conflicts with a capture).
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_info(sim, s).id;
  std::vector<void*> blocks;
  blocks.push_back(pool.allocate(2 * kMiB, s));
  blocks.push_back(pool.allocate(3 * kMiB, s));

  GraphMemorySnapshot seen;
  GraphMemoryStats seen_totals;
  std::thread([&] {
    seen = pool.graph_memory_snapshot();
    seen_totals = pool.graph_memory_stats();
  }).join();
  INFO("snapshot " << describe(seen));
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].capture_id == id);
  CHECK(seen[0].capturing);
  CHECK(seen[0].held_bytes == 5 * kMiB);
  CHECK(seen[0].held_blocks == 2);
  CHECK(seen[0].output_bytes == 5 * kMiB);
  CHECK(seen[0].output_blocks == 2);
  CHECK(seen_totals.held_bytes == 5 * kMiB);
  CHECK(capture_info(sim, s).status == cudaStreamCaptureStatusActive);

  // A reader looping while the capture allocates more: every snapshot it
  // takes is one of the capture's states, in order (collected here,
  // asserted on this thread).
  std::atomic<bool> done{false};
  std::vector<GraphMemorySnapshot> reads;
  std::thread reader([&] {
    while (!done.load()) reads.push_back(pool.graph_memory_snapshot());
    reads.push_back(pool.graph_memory_snapshot());
  });
  std::vector<std::uint64_t> prefix = {5 * kMiB};
  for (int i = 0; i < 20; ++i) {
    const std::size_t bytes = std::size_t(1 + i % 3) * kMiB;
    blocks.push_back(pool.allocate(bytes, s));
    prefix.push_back(prefix.back() + bytes);
  }
  done.store(true);
  reader.join();
  CHECK(capture_info(sim, s).status == cudaStreamCaptureStatusActive);
  std::uint64_t last = 0;
  bool all_consistent = true;
  for (const GraphMemorySnapshot& r : reads) {
    if (r.size() != 1 || r[0].capture_id != id || !r[0].capturing) {
      all_consistent = false;
      continue;
    }
    const auto at = std::find(prefix.begin(), prefix.end(), r[0].held_bytes);
    const std::uint64_t blocks_then = 2 + static_cast<std::uint64_t>(at - prefix.begin());
    if (at == prefix.end() || r[0].held_blocks != blocks_then || r[0].output_bytes != r[0].held_bytes ||
        r[0].output_blocks != r[0].held_blocks || r[0].held_bytes < last)
      all_consistent = false;
    last = r[0].held_bytes;
  }
  CHECK(all_consistent);
  REQUIRE_FALSE(reads.empty());
  REQUIRE(reads.back().size() == 1);
  CHECK(reads.back()[0].held_bytes == prefix.back());  // the last read came after the last allocation

  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  // From another thread after the end: still listed, and still "capturing"
  // (no call of the pool has seen s outside the capture yet).
  std::thread([&] { seen = pool.graph_memory_snapshot(); }).join();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].capturing);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  std::thread([&] { seen = pool.graph_memory_snapshot(); }).join();
  CHECK(seen.empty());
  for (void* p : blocks) pool.deallocate(p, s);  // the outputs stay the caller's
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: an invalidated capture is listed until it ends, then its graph is released",
          "[graphs][scenario]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  const unsigned long long id = capture_info(sim, s).id;
  void* kept = pool.allocate(4 * kMiB, s);
  void* freed = pool.allocate(2 * kMiB, s);
  pool.deallocate(freed, s);  // freed in the capture: the graph keeps it
  CHECK(sim.stream_query(s) == cudaErrorStreamCaptureUnsupported);
  REQUIRE(capture_info(sim, s).status == cudaStreamCaptureStatusInvalidated);
  GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  INFO("snapshot " << describe(snap));
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].capture_id == id);
  CHECK(snap[0].capturing);
  CHECK(snap[0].held_bytes == 6 * kMiB);
  CHECK(snap[0].held_blocks == 2);
  CHECK(snap[0].output_bytes == 4 * kMiB);
  CHECK(snap[0].output_blocks == 1);
  // "An allocation on an invalidated capture fails with
  // cudaErrorStreamCaptureInvalidated", changing nothing.
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, kMiB, s) == cudaErrorStreamCaptureInvalidated);
  snap = pool.graph_memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].held_bytes == 6 * kMiB);
  cudaGraph_t graph = nullptr;
  CHECK(sim.end_capture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  // Released at the end: gone from the snapshot at once.
  snap = pool.graph_memory_snapshot();
  INFO("after the end " << describe(snap));
  CHECK(snap.empty());
  const GraphMemoryStats totals = pool.graph_memory_stats();
  CHECK(totals.held_bytes == 0);
  CHECK(totals.graphs == 0);
  CHECK(totals.released_graphs == 1);
  // What it handed out is the caller's: a live block, freed like any other.
  CHECK(pool.block_size(kept) == 4 * kMiB);
  CHECK(pool.stats().live_blocks == 1);
  CHECK(pool.stats().used_current == 4 * kMiB);
  pool.deallocate(kept, other);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: capturing stays true after the end until a call on the watched stream",
          "[graphs][scenario]") {
  // "The capture may still be in progress (no call of the pool has seen its
  // stream outside it since)"; the stream watched is that of the capture's
  // first allocation, here a forked one.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  EventHandle fork = nullptr, join = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.event_create(&join) == cudaSuccess);
  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_info(sim, origin).id;
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  void* a = pool.allocate(2 * kMiB, side);  // the first allocation: `side` is watched
  void* b = pool.allocate(kMiB, origin);
  REQUIRE(sim.event_record(join, side) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(origin, join) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(origin, &graph) == cudaSuccess);

  auto only = [&]() {
    const GraphMemorySnapshot snap = pool.graph_memory_snapshot();
    REQUIRE(snap.size() == 1);
    REQUIRE(snap[0].capture_id == id);
    CHECK(snap[0].held_bytes == 3 * kMiB);
    CHECK(snap[0].held_blocks == 2);
    return snap[0];
  };
  CHECK(only().capturing);
  (void)pool.stats();
  (void)pool.graph_memory_stats();
  CHECK(only().capturing);  // reads query no stream
  void* c = pool.allocate(kMiB, other);
  pool.deallocate(c, other);
  CHECK(only().capturing);  // another stream says nothing of this capture
  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  REQUIRE(sim.graph_launch(exec, other) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(other) == cudaSuccess);
  CHECK(only().capturing);
  void* d = pool.allocate(kMiB, origin);  // the origin, not the watched stream
  pool.deallocate(d, origin);
  CHECK(only().capturing);
  pool.deallocate(a, side);  // the caller's free of an output, on the watched stream
  const GraphHolding after = only();
  CHECK_FALSE(after.capturing);
  CHECK(after.output_blocks == 2);  // freed by the caller, not in the graph: still its output
  CHECK(after.output_bytes == 3 * kMiB);
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  pool.deallocate(b, origin);
  CHECK(pool.stats().used_current == 0);
  sim.event_destroy(fork);
  sim.event_destroy(join);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: a new capture on the watched stream finds the old one over", "[graphs][scenario]") {
  // The Limits section: a capture counts as over once "an allocation or free
  // of the pool on the stream it allocated on finds that stream outside it".
  // A stream capturing a later capture is outside the earlier one.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  std::vector<void*> first_out, second_out;
  cudaGraph_t first = nullptr, second = nullptr;
  const unsigned long long first_id = capture_allocating(sim, pool, s, {2 * kMiB}, &first_out, &first);
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long second_id = capture_info(sim, s).id;
  second_out.push_back(pool.allocate(kMiB, s));
  const GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  INFO("snapshot " << describe(snap));
  REQUIRE(snap.size() == 2);
  CHECK(snap[0].capture_id == first_id);
  CHECK(snap[1].capture_id == second_id);
  CHECK(snap[1].capturing);
  CHECK_FALSE(snap[0].capturing);
  REQUIRE(sim.end_capture(s, &second) == cudaSuccess);
  REQUIRE(sim.graph_destroy(first) == cudaSuccess);
  REQUIRE(sim.graph_destroy(second) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  for (void* p : first_out) pool.deallocate(p, s);
  for (void* p : second_out) pool.deallocate(p, s);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: two captures open at once on two streams", "[graphs][scenario]") {
  // Each capture's allocations go to its own graph, interleaved; both are
  // listed as capturing, by id; neither gets the other's freed block.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s1 = sim.create_stream();
  cudaStream_t s2 = sim.create_stream();
  REQUIRE(sim.begin_capture(s1, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(sim.begin_capture(s2, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  const unsigned long long id1 = capture_info(sim, s1).id;
  const unsigned long long id2 = capture_info(sim, s2).id;
  REQUIRE(id1 != id2);
  // The second capture allocates first: the snapshot is by id, not by age.
  void* b1 = pool.allocate(3 * kMiB, s2);
  void* a1 = pool.allocate(kMiB, s1);
  void* a2 = pool.allocate(2 * kMiB, s1);
  pool.deallocate(a2, s1);                 // freed in capture 1
  void* b2 = pool.allocate(2 * kMiB, s2);  // capture 2 cannot get it
  CHECK(b2 != a2);
  void* a3 = pool.allocate(2 * kMiB, s1);  // capture 1 reuses it
  CHECK(a3 == a2);
  GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  INFO("snapshot " << describe(snap));
  REQUIRE(snap.size() == 2);
  const GraphHolding* h1 = entry_of(snap, id1);
  const GraphHolding* h2 = entry_of(snap, id2);
  REQUIRE(h1 != nullptr);
  REQUIRE(h2 != nullptr);
  CHECK(snap[0].capture_id < snap[1].capture_id);
  CHECK(h1->capturing);
  CHECK(h2->capturing);
  CHECK(h1->held_bytes == 3 * kMiB);
  CHECK(h1->held_blocks == 2);
  CHECK(h1->output_bytes == 3 * kMiB);
  CHECK(h1->output_blocks == 2);
  CHECK(h2->held_bytes == 5 * kMiB);
  CHECK(h2->held_blocks == 2);
  CHECK(h2->output_bytes == 5 * kMiB);
  CHECK(pool.graph_memory_stats().held_bytes == 8 * kMiB);
  CHECK(pool.graph_memory_stats().graphs == 2);
  cudaGraph_t g1 = nullptr, g2 = nullptr;
  REQUIRE(sim.end_capture(s1, &g1) == cudaSuccess);
  REQUIRE(sim.end_capture(s2, &g2) == cudaSuccess);
  REQUIRE(sim.graph_destroy(g2) == cudaSuccess);
  snap = pool.graph_memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].capture_id == id1);
  REQUIRE(sim.graph_destroy(g1) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  CHECK(pool.graph_memory_stats().released_graphs == 2);
  for (void* p : {a1, a3}) pool.deallocate(p, s1);
  for (void* p : {b1, b2}) pool.deallocate(p, s2);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: an output freed inside another graph's capture, released in either order",
          "[graphs][scenario]") {
  // "made under another capture, that capture's graph holds the block too
  // ... and it goes back once both graphs are released"; the totals count
  // it once (graphs.hpp: "blocks of other graphs whose caller's free it
  // captured").
  for (const bool producer_first : {true, false}) {
    INFO((producer_first ? "the producer released first" : "the consumer released first"));
    SimDriver sim(small_sim());
    Pool pool(options_on(sim));
    cudaStream_t s = sim.create_stream();
    cudaStream_t t = sim.create_stream();
    std::vector<void*> outs;
    cudaGraph_t producer = nullptr;
    const unsigned long long pid = capture_allocating(sim, pool, s, {4 * kMiB, kMiB}, &outs, &producer);

    REQUIRE(sim.begin_capture(t, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const unsigned long long cid = capture_info(sim, t).id;
    void* own = pool.allocate(2 * kMiB, t);
    pool.deallocate(outs[0], t);  // the producer's 4 MiB output, freed in this capture
    cudaGraph_t consumer = nullptr;
    REQUIRE(sim.end_capture(t, &consumer) == cudaSuccess);
    // Final for the caller: a second free is refused, on any stream.
    CHECK(pool.try_deallocate(outs[0], s) == cudaErrorInvalidValue);

    GraphMemorySnapshot snap = pool.graph_memory_snapshot();
    INFO("snapshot " << describe(snap));
    REQUIRE(snap.size() == 2);
    CHECK(snap[0].capture_id == pid);
    CHECK(snap[1].capture_id == cid);
    CHECK(snap[0].held_bytes == 5 * kMiB);
    CHECK(snap[0].held_blocks == 2);
    CHECK(snap[0].output_bytes == 5 * kMiB);  // allocated in it and not freed in it
    CHECK(snap[0].output_blocks == 2);
    CHECK(snap[1].held_bytes == 6 * kMiB);  // its own block and the producer's
    CHECK(snap[1].held_blocks == 2);
    CHECK(snap[1].output_bytes == 2 * kMiB);  // only what it allocated
    CHECK(snap[1].output_blocks == 1);
    GraphMemoryStats totals = pool.graph_memory_stats();
    CHECK(totals.held_bytes == 7 * kMiB);  // the shared block once
    CHECK(totals.held_blocks == 3);

    const std::uint64_t used = pool.stats().used_current;
    CHECK(used == 7 * kMiB);
    REQUIRE(sim.graph_destroy(producer_first ? producer : consumer) == cudaSuccess);
    snap = pool.graph_memory_snapshot();
    REQUIRE(snap.size() == 1);
    totals = pool.graph_memory_stats();
    if (producer_first) {
      CHECK(snap[0].capture_id == cid);
      CHECK(snap[0].held_bytes == 6 * kMiB);  // still holds the producer's block
      CHECK(snap[0].held_blocks == 2);
      CHECK(totals.held_bytes == 6 * kMiB);
      // The producer's other output stays the caller's: still used.
      CHECK(pool.stats().used_current == 7 * kMiB);
    } else {
      CHECK(snap[0].capture_id == pid);
      CHECK(snap[0].held_bytes == 5 * kMiB);
      CHECK(snap[0].output_blocks == 2);
      CHECK(totals.held_bytes == 5 * kMiB);
      CHECK(pool.stats().used_current == 7 * kMiB);  // the consumer's output is the caller's now
    }
    REQUIRE(sim.graph_destroy(producer_first ? consumer : producer) == cudaSuccess);
    CHECK(pool.graph_memory_snapshot().empty());
    totals = pool.graph_memory_stats();
    CHECK(totals.held_bytes == 0);
    CHECK(totals.released_graphs == 2);
    // Back: the shared block; the caller still has `own` and the producer's 1 MiB.
    CHECK(pool.stats().used_current == 3 * kMiB);
    CHECK(pool.stats().live_blocks == 2);
    pool.deallocate(own, t);
    pool.deallocate(outs[1], s);
    CHECK(pool.stats().used_current == 0);
    pool.check_invariants();
  }
}

TEST_CASE("graph holdings scenario: a capture whose only pool call frees another graph's output",
          "[graphs][scenario]") {
  // The consumer allocates nothing but holds the producer's block (graphs.hpp:
  // held_bytes counts "blocks of other graphs whose caller's free it
  // captured"). Once the producer is released, that block is held by the
  // consumer alone: the snapshot must still say which graph holds what of
  // graph_memory_stats()'s bytes.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t t = sim.create_stream();
  std::vector<void*> outs;
  cudaGraph_t producer = nullptr;
  const unsigned long long pid = capture_allocating(sim, pool, s, {2 * kMiB}, &outs, &producer);
  REQUIRE(sim.begin_capture(t, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long cid = capture_info(sim, t).id;
  pool.deallocate(outs[0], t);
  cudaGraph_t consumer = nullptr;
  REQUIRE(sim.end_capture(t, &consumer) == cudaSuccess);
  REQUIRE(sim.graph_destroy(producer) == cudaSuccess);

  const GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  const GraphMemoryStats totals = pool.graph_memory_stats();
  INFO("snapshot " << describe(snap) << ", totals " << totals.held_bytes << "B/" << totals.held_blocks << " in "
                   << totals.graphs << " graphs");
  CHECK(entry_of(snap, pid) == nullptr);  // released
  CHECK(totals.held_bytes == 2 * kMiB);   // the block is not back: the consumer holds it
  std::uint64_t listed = 0;
  for (const GraphHolding& h : snap) listed += h.held_bytes;
  CHECK(listed == totals.held_bytes);
  const GraphHolding* c = entry_of(snap, cid);
  CHECK(c != nullptr);
  if (c != nullptr) {
    CHECK(c->held_bytes == 2 * kMiB);
    CHECK(c->held_blocks == 1);
    CHECK(c->output_blocks == 0);
  }
  REQUIRE(sim.graph_destroy(consumer) == cudaSuccess);
  CHECK(pool.graph_memory_snapshot().empty());
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.stats().used_current == 0);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: an unjoined fork fails the capture and its graph is released",
          "[graphs][scenario]") {
  // "A capture that fails (a forked stream not joined back ...) has its graph
  // destroyed by the runtime at cudaStreamEndCapture, so its memory comes back
  // as a released graph's does, whichever stream allocated it".
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t origin = sim.create_stream();
  cudaStream_t side = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  EventHandle fork = nullptr;
  REQUIRE(sim.event_create(&fork) == cudaSuccess);
  REQUIRE(sim.begin_capture(origin, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const unsigned long long id = capture_info(sim, origin).id;
  REQUIRE(sim.event_record(fork, origin) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(side, fork) == cudaSuccess);
  void* on_side = pool.allocate(3 * kMiB, side);
  void* temp = pool.allocate(kMiB, side);
  pool.deallocate(temp, side);
  void* on_origin = pool.allocate(2 * kMiB, origin);
  // Work of the side's own, not joined back (sova enqueues nothing itself).
  sim.launch(side, [] {});
  GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].capture_id == id);
  CHECK(snap[0].held_bytes == 6 * kMiB);
  CHECK(snap[0].held_blocks == 3);
  CHECK(snap[0].output_bytes == 5 * kMiB);
  CHECK(snap[0].output_blocks == 2);
  cudaGraph_t graph = nullptr;
  CHECK(sim.end_capture(origin, &graph) == cudaErrorStreamCaptureUnjoined);
  snap = pool.graph_memory_snapshot();
  INFO("after the failed end " << describe(snap));
  CHECK(snap.empty());
  CHECK(pool.graph_memory_stats().held_bytes == 0);
  CHECK(pool.graph_memory_stats().released_graphs == 1);
  // The outputs are the caller's.
  CHECK(pool.stats().live_blocks == 2);
  CHECK(pool.stats().used_current == 5 * kMiB);
  pool.deallocate(on_side, other);
  pool.deallocate(on_origin, other);
  CHECK(pool.stats().used_current == 0);
  sim.event_destroy(fork);
  pool.check_invariants();
}

TEST_CASE("graph holdings scenario: an ordinary free on the watched stream finds the capture over",
          "[graphs][scenario]") {
  // docs/graphs.md, "Limits": "A capture counts as over once its graph is
  // released, or once an allocation or free of the pool on the stream it
  // allocated on finds that stream outside it"; graphs.hpp: capturing means
  // "no call of the pool has seen its stream outside it since". Here the only
  // call on the watched stream after the end is the free of an eager block.
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  void* eager = pool.allocate(kMiB, other);
  std::vector<void*> outs;
  cudaGraph_t graph = nullptr;
  const unsigned long long id = capture_allocating(sim, pool, s, {2 * kMiB}, &outs, &graph);
  GraphMemorySnapshot snap = pool.graph_memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK(snap[0].capture_id == id);
  CHECK(snap[0].capturing);
  pool.deallocate(eager, s);  // a free of the pool on the watched stream, outside the capture
  snap = pool.graph_memory_snapshot();
  REQUIRE(snap.size() == 1);
  CHECK_FALSE(snap[0].capturing);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  for (void* p : outs) pool.deallocate(p, s);
  pool.check_invariants();
}
