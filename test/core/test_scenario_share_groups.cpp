// Scenario tests of share groups of graph memory (docs/graphs.md, "Graphs that
// never run at once"), written from the documentation only (docs/graphs.md,
// include/sova/pool.hpp, graphs.hpp, sova.h, sim.hpp), as a user would use
// them, on the simulation.
//
// The randomized scenario runs programs of captures over 1-3 streams on two
// pools, each capture joining a group of each pool or not (named on the stream
// of its first allocation, on another stream as a decoy, or cancelled), with
// scratch and outputs of random whole-MiB sizes, kernels (sim.launch) that
// write a per-graph, per-launch byte into every block where it is allocated
// and check it before the capture frees it, graphs instantiated and launched
// one at a time on one stream, outputs freed by the caller at odd moments,
// groups created and destroyed before or after their members, invalidated
// captures, double frees and bad ids. A model of every block checks, after
// every step:
//  * no allocation gets memory it may not: a capture's new block overlaps only
//    blocks its own capture freed on the same stream or blocks another member
//    of the same group freed in its capture ("What is shared"); never a live
//    eager block, a member's output while it is the caller's, or a block of a
//    graph outside the group;
//  * outputs keep what their graph's last launch wrote across every other
//    graph's launches (the ambiguous case, a later member's output placed on
//    an earlier member's scratch, is counted apart: see the report);
//  * graph_memory_stats().held_bytes is the union of what the live graphs
//    and the groups hold ("The statistics count each block once");
//  * at the end, with every graph released and every group destroyed, held
//    bytes are 0 and the pool's used bytes are the outputs still live.
// Seeds are fixed; a failure names its seed and step (and prints a trace of
// the steps on a held-bytes mismatch). The model keeps away from the two
// defects its first runs found (outputs on a group's block freed under a
// capture; a capture whose first call of a pool is a free), each a test case
// of its own below.
//
// Then one test case each: which capture joins (first allocation's stream,
// one capture per call, cancel, a refused call keeps the name, forked
// captures, a failed first allocation); 16 graphs of 8 MiB scratch on one
// stream (the docs' figure) with outputs; one graph per batch size; bad input
// changing nothing; a pool destroyed with groups alive; an unjoined forked
// member; two member captures open at once; group calls during another
// thread's global capture; trims; outputs on their own freed scratch; naming
// cudaStreamPerThread.
//
// Found by these tests and fixed: an invalidated member's output, and a
// released member's output on its freed scratch while the group lives, were
// not the caller's (a free under capture accepted, the caller's free then
// refused); a capture whose only call of the pool is a free took the stream's
// name. A known limit, [!shouldfail]: 16 members whose small outputs are
// allocated before their scratch hold the sum, not one scratch (blocks are
// shared whole: docs/graphs.md, "What is shared"). Reported, not asserted (the docs
// do not say): a later member's output placed on an earlier member's scratch
// is overwritten by that member's launches; a name given for
// cudaStreamPerThread reaches another thread's per-thread stream.
#include "core/sim_pool_fixture.hpp"

#include <sova/graphs.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// ---- kernels ------------------------------------------------------------------

void fill_bytes(void* p, std::size_t n, unsigned char b) { std::memset(p, b, n); }

bool all_bytes(const void* p, std::size_t n, unsigned char b) {
  std::uint64_t word = 0;
  std::memset(&word, b, sizeof word);
  const auto* w = static_cast<const std::uint64_t*>(p);
  const std::size_t words = n / 8;
  for (std::size_t i = 0; i < words; ++i)
    if (w[i] != word) return false;
  const auto* c = static_cast<const unsigned char*>(p);
  for (std::size_t i = words * 8; i < n; ++i)
    if (c[i] != b) return false;
  return true;
}

unsigned char tag_of(unsigned base, unsigned launch) { return static_cast<unsigned char>(base * 31u + launch * 7u + 1u); }

// ---- the model --------------------------------------------------------------------

struct Rec {
  int pool = 0;
  std::uintptr_t p = 0;
  std::size_t n = 0;
  int graph = -1;  // -1: eager
  cudaStream_t alloc_on = nullptr;
  bool occupied = true;            // not freed in its capture
  cudaStream_t freed_on = nullptr;  // freed in its capture on
  bool caller_freed = false;
  int freed_under = -1;  // the capture that made the caller's free
  bool gone = false;     // back to the pool
  bool at_risk = false;  // on another member's scratch (the ambiguous direction)
  bool on_group_block = false;  // on a block freed in a member's capture (its own, or another member's)
  std::size_t slack = 0;  // reused a larger block: the remainder may or may not be held
  unsigned base = 0;      // tag base
};

struct Gr {
  unsigned long long id = 0;
  std::array<std::uint64_t, 2> group{{0, 0}};
  std::array<bool, 2> allocated{{false, false}};
  std::vector<cudaStream_t> streams;
  cudaGraph_t graph = nullptr;
  bool graph_alive = false;
  std::vector<cudaGraphExec_t> execs;
  bool open = false, invalidated = false, released = false, ended = false;
  std::unique_ptr<std::atomic<unsigned>> launches = std::make_unique<std::atomic<unsigned>>(0);
  std::vector<int> recs;
};

struct Grp {
  std::uint64_t id = 0;
  bool destroyed = false;
  std::vector<int> members;
};

struct Coverage {
  std::size_t captures = 0, member_captures = 0, forked_members = 0, group_reuse = 0, own_reuse = 0,
              decoys = 0, cancels = 0, outputs = 0, outputs_freed_outside = 0, outputs_freed_under_capture = 0,
              double_frees = 0, launches = 0, output_checks = 0, group_destroy_before = 0, group_destroy_after = 0,
              invalidated = 0, bad_inputs = 0, ambiguous_overlaps = 0, at_risk_outputs = 0, ambiguous_clobbers = 0,
              two_pool_captures = 0;
  void add(const Coverage& o) {
    captures += o.captures;
    member_captures += o.member_captures;
    forked_members += o.forked_members;
    group_reuse += o.group_reuse;
    own_reuse += o.own_reuse;
    decoys += o.decoys;
    cancels += o.cancels;
    outputs += o.outputs;
    outputs_freed_outside += o.outputs_freed_outside;
    outputs_freed_under_capture += o.outputs_freed_under_capture;
    double_frees += o.double_frees;
    launches += o.launches;
    output_checks += o.output_checks;
    group_destroy_before += o.group_destroy_before;
    group_destroy_after += o.group_destroy_after;
    invalidated += o.invalidated;
    bad_inputs += o.bad_inputs;
    ambiguous_overlaps += o.ambiguous_overlaps;
    at_risk_outputs += o.at_risk_outputs;
    ambiguous_clobbers += o.ambiguous_clobbers;
    two_pool_captures += o.two_pool_captures;
  }
};

SimConfig scenario_sim() {
  SimConfig config;
  config.total_memory = std::size_t{2} << 30;
  return config;
}

class Scenario {
 public:
  explicit Scenario(std::uint32_t seed) : seed_(seed), rng_(seed), sim_(scenario_sim()) {
    pools_[0] = std::make_unique<Pool>(options_on(sim_));
    pools_[1] = std::make_unique<Pool>(options_on(sim_));
    for (int i = 0; i < 4; ++i) cap_.push_back(sim_.create_stream());
    eager_ = sim_.create_stream();
    launch_ = sim_.create_stream();
    REQUIRE(sim_.event_create(&fork_) == cudaSuccess);
    for (int i = 0; i < 2; ++i) REQUIRE(sim_.event_create(&join_[static_cast<std::size_t>(i)]) == cudaSuccess);
  }
  ~Scenario() {
    sim_.stream_synchronize(launch_);
    sim_.event_destroy(fork_);
    for (EventHandle e : join_) sim_.event_destroy(e);
  }

  const Coverage& coverage() const { return cov_; }

  void run(int steps) {
    // Group ids start at 1 in each pool.
    for (int p = 0; p < 2; ++p) {
      create_group(p);
      CHECK(groups_[static_cast<std::size_t>(p)].back().id == 1);
    }
    check("start");
    for (int i = 0; i < steps; ++i) {
      step_ = i;
      one_step();
    }
    finish();
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }
  Pool& pool(int p) { return *pools_[static_cast<std::size_t>(p)]; }
  std::string where() const {
    std::ostringstream o;
    o << "seed " << seed_ << ", step " << step_;
    return o.str();
  }

  // ---- group bookkeeping ------------------------------------------------------
  Grp* group(int p, std::uint64_t id) {
    for (Grp& g : groups_[static_cast<std::size_t>(p)])
      if (g.id == id) return &g;
    return nullptr;
  }
  bool group_holds(int p, std::uint64_t id) {
    const Grp* g = group(p, id);
    if (g == nullptr) return false;
    if (!g->destroyed) return true;
    for (int m : g->members)
      if (!graphs_[static_cast<std::size_t>(m)].released) return true;
    return false;
  }
  std::vector<std::uint64_t> open_groups(int p) {
    std::vector<std::uint64_t> out;
    for (const Grp& g : groups_[static_cast<std::size_t>(p)])
      if (!g.destroyed) out.push_back(g.id);
    return out;
  }

  std::string describe(int g) const {
    if (g < 0) return "-";
    const Gr& x = graphs_[static_cast<std::size_t>(g)];
    std::ostringstream o;
    o << "graph " << g << " {released " << x.released << ", invalidated " << x.invalidated << ", open " << x.open
      << ", groups " << x.group[0] << "/" << x.group[1] << ", streams " << x.streams.size() << "}";
    return o.str();
  }
  std::string dump(int p) {
    std::ostringstream o;
    for (std::size_t i = 0; i < recs_.size(); ++i) {
      const Rec& r = recs_[i];
      if (r.pool != p || r.gone) continue;
      o << "\n  rec " << i << " @" << (r.p - pool(p).va_base()) / kMiB << "MiB +" << r.n / kMiB << "MiB "
        << describe(r.graph) << " occupied " << r.occupied << " caller_freed " << r.caller_freed << " freed_under "
        << r.freed_under << " held " << held(r) << " maybe " << maybe_held(r) << " slack " << r.slack << " POOL: "
        << pool(p).describe_pointer(reinterpret_cast<void*>(r.p)) << " size " << pool(p).block_size(reinterpret_cast<void*>(r.p));
    }
    for (const GraphHolding& h : pool(p).graph_memory_snapshot()) {
      int gi = -1;
      for (std::size_t g = 0; g < graphs_.size(); ++g)
        if (graphs_[g].id == h.capture_id) gi = static_cast<int>(g);
      o << "\n  listed: graph " << gi << " held " << h.held_bytes / kMiB << "MiB/" << h.held_blocks << " out "
        << h.output_bytes / kMiB << "MiB/" << h.output_blocks;
    }
    for (const Grp& g : groups_[static_cast<std::size_t>(p)]) {
      o << "\n  group " << g.id << " destroyed " << g.destroyed << " members";
      for (int m : g.members) o << " " << m;
    }
    return o.str();
  }
  bool same_group(int a, int b, int p) {
    if (a == b) return true;
    const std::uint64_t x = graphs_[static_cast<std::size_t>(a)].group[static_cast<std::size_t>(p)];
    return x != 0 && x == graphs_[static_cast<std::size_t>(b)].group[static_cast<std::size_t>(p)];
  }
  bool held(const Rec& r) {
    if (r.gone || r.graph < 0) return false;
    if (r.freed_under >= 0 && !graphs_[static_cast<std::size_t>(r.freed_under)].released) return true;
    const Gr& g = graphs_[static_cast<std::size_t>(r.graph)];
    if (!g.released) return true;
    const std::uint64_t gid = g.group[static_cast<std::size_t>(r.pool)];
    return !r.occupied && gid != 0 && group_holds(r.pool, gid);
  }
  // A caller's free captured in a member's capture: whether that block
  // becomes the group's is not said (ambiguity), so it may stay held.
  bool maybe_held(const Rec& r) {
    if (r.gone || r.graph < 0 || r.freed_under < 0) return false;
    const Gr& h = graphs_[static_cast<std::size_t>(r.freed_under)];
    const std::uint64_t gid = h.group[static_cast<std::size_t>(r.pool)];
    return gid != 0 && group_holds(r.pool, gid);
  }
  // Blocks no graph or group holds any more: the caller's outputs stay live
  // (an ordinary block of the pool), the rest is back.
  void refresh() {
    for (Rec& r : recs_) {
      if (r.gone || r.graph < 0 || held(r) || maybe_held(r)) continue;
      const Gr& g = graphs_[static_cast<std::size_t>(r.graph)];
      if (!g.released) continue;
      if (!(r.occupied && !r.caller_freed)) r.gone = true;
    }
  }
  bool caller_live(const Rec& r) const {
    return !r.gone && (r.graph < 0 || (r.occupied && !r.caller_freed && graphs_[static_cast<std::size_t>(r.graph)].ended));
  }

  // ---- checks -------------------------------------------------------------------
  static std::uint64_t union_bytes(std::vector<std::pair<std::uintptr_t, std::uintptr_t>> v) {
    std::sort(v.begin(), v.end());
    std::uint64_t total = 0;
    std::uintptr_t end = 0;
    for (auto [a, b] : v) {
      if (a >= end) {
        total += b - a;
        end = b;
      } else if (b > end) {
        total += b - end;
        end = b;
      }
    }
    return total;
  }

  void check(const std::string& what) {
    INFO(where() << ": " << what);
    refresh();
    for (int p = 0; p < 2; ++p) {
      INFO("pool " << p);
      std::vector<std::pair<std::uintptr_t, std::uintptr_t>> lo, hi;
      std::uint64_t slack = 0;
      for (const Rec& r : recs_) {
        if (r.pool != p) continue;
        const bool h = held(r);
        if (h) lo.emplace_back(r.p, r.p + r.n);
        if (h || maybe_held(r)) {
          hi.emplace_back(r.p, r.p + r.n);
          slack += r.slack;
        }
      }
      const GraphMemoryStats st = pool(p).graph_memory_stats();
      const std::uint64_t want_lo = union_bytes(lo), want_hi = union_bytes(hi) + slack;
      trace_ << "\n  [" << what << "] pool " << p << " held " << st.held_bytes / kMiB << " lo " << want_lo / kMiB << " hi " << want_hi / kMiB;
      INFO("held " << st.held_bytes << ", expected between " << want_lo << " and " << want_hi
                    << (st.held_bytes < want_lo || st.held_bytes > want_hi ? dump(p) + trace_.str() : std::string()));
      CHECK(st.held_bytes >= want_lo);
      CHECK(st.held_bytes <= want_hi);
      CHECK(pool(p).stats().graph_held_bytes == st.held_bytes);
      // Per graph: every unreleased graph is listed, its outputs counted.
      const GraphMemorySnapshot snap = pool(p).graph_memory_snapshot();
      for (std::size_t g = 0; g < graphs_.size(); ++g) {
        const Gr& gr = graphs_[g];
        if (gr.released || !gr.allocated[static_cast<std::size_t>(p)] || gr.open) continue;
        const GraphHolding* e = nullptr;
        for (const GraphHolding& h : snap)
          if (h.capture_id == gr.id) e = &h;
        INFO("graph " << g << " (capture " << gr.id << ")");
        REQUIRE(e != nullptr);
        std::uint64_t out_blocks = 0, out_bytes = 0;
        for (int ri : gr.recs) {
          const Rec& r = recs_[static_cast<std::size_t>(ri)];
          if (r.pool == p && r.occupied) {
            out_blocks += 1;
            out_bytes += r.n;
          }
        }
        CHECK(e->output_blocks == out_blocks);
        CHECK(e->output_bytes >= out_bytes);
        CHECK(e->held_bytes >= e->output_bytes);
      }
      pool(p).check_invariants();
    }
  }

  // Every output its caller holds keeps what its graph's last launch wrote;
  // every eager block what it was filled with.
  void check_contents(const std::string& what) {
    INFO(where() << ": " << what);
    REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);
    REQUIRE(sim_.stream_synchronize(eager_) == cudaSuccess);
    CHECK(bad_->load() == 0);
    for (const Rec& r : recs_) {
      if (!caller_live(r)) continue;
      unsigned char want = 0;
      if (r.graph < 0) {
        want = tag_of(r.base, 0);
      } else {
        const unsigned k = graphs_[static_cast<std::size_t>(r.graph)].launches->load();
        if (k == 0) continue;  // never written
        want = tag_of(r.base, k);
      }
      ++cov_.output_checks;
      const bool ok = all_bytes(reinterpret_cast<void*>(r.p), r.n, want);
      if (!ok && r.at_risk) {
        ++cov_.ambiguous_clobbers;
        continue;
      }
      INFO("block of graph " << r.graph << " at " << r.p << " +" << r.n);
      CHECK(ok);
    }
  }

  // What a new block may overlap (model, pool `p`): see the file's comment.
  void check_new_block(Rec& n, int capture) {
    for (std::size_t i = 0; i < recs_.size(); ++i) {
      const Rec& r = recs_[i];
      if (&r == &n || r.pool != n.pool || r.gone) continue;
      if (!(n.p < r.p + r.n && r.p < n.p + n.n)) continue;
      std::ostringstream why;
      why << where() << ": new block " << n.p << " +" << n.n << " (graph " << capture << ") overlaps block " << r.p
          << " +" << r.n << " of graph " << r.graph << " (occupied " << r.occupied << ", caller_freed "
          << r.caller_freed << ", freed_under " << r.freed_under << ", freed_on " << r.freed_on << ") " << describe(r.graph)
          << "; freed under: " << describe(r.freed_under) << "; new block's: " << describe(capture);
      INFO(why.str());
      bool ok = false, ambiguous = false, group_block = false;
      if (capture < 0) {
        // Eager: only memory nobody holds (a maybe-held block: ambiguous).
        ambiguous = !held(r) && maybe_held(r);
      } else if (r.graph < 0) {
        ok = false;
      } else if (r.graph == capture) {
        ok = !r.occupied && r.freed_on == n.alloc_on;
        if (ok) ++cov_.own_reuse;
        if (ok && graphs_[static_cast<std::size_t>(capture)].group[static_cast<std::size_t>(n.pool)] != 0)
          n.on_group_block = true;
      } else if ((r.freed_under >= 0 && same_group(r.freed_under, capture, n.pool)) || (!held(r) && maybe_held(r))) {
        ambiguous = true;  // a caller's free captured in this capture or a fellow member's: reusable? not said
      } else if (!r.occupied) {
        const std::uint64_t mine = graphs_[static_cast<std::size_t>(capture)].group[static_cast<std::size_t>(n.pool)];
        const std::uint64_t theirs = graphs_[static_cast<std::size_t>(r.graph)].group[static_cast<std::size_t>(n.pool)];
        ok = mine != 0 && mine == theirs;
        group_block = ok;
      }
      if (ambiguous) {
        ++cov_.ambiguous_overlaps;
        continue;
      }
      CHECK(ok);
      if (group_block) {
        n.at_risk = true;  // becomes "at risk" if it ends up an output
        n.on_group_block = true;
        ++cov_.group_reuse;
      }
      if (ok && r.n > n.n) n.slack = std::max(n.slack, r.n - n.n);
    }
  }

  // ---- steps ----------------------------------------------------------------------
  void create_group(int p) {
    Grp g;
    REQUIRE(pool(p).create_graph_share_group(&g.id) == cudaSuccess);
    for (const Grp& o : groups_[static_cast<std::size_t>(p)]) CHECK(o.id < g.id);  // never reused
    groups_[static_cast<std::size_t>(p)].push_back(g);
  }

  bool destroy_group() {
    const int p = static_cast<int>(pick(2));
    const std::vector<std::uint64_t> open = open_groups(p);
    if (open.empty()) return false;
    const std::uint64_t id = open[pick(open.size())];
    Grp* g = group(p, id);
    bool any_live = false;
    for (int m : g->members) any_live |= !graphs_[static_cast<std::size_t>(m)].released;
    const std::uint64_t before = pool(p).graph_memory_stats().held_bytes;
    REQUIRE(pool(p).destroy_graph_share_group(id) == cudaSuccess);
    if (g->members.empty()) {
      INFO(where() << ": pool " << p << ", group " << id << " no capture joined (the model)");
      CHECK(pool(p).graph_memory_stats().held_bytes == before);
    }
    g->destroyed = true;
    trace_ << "\n" << step_ << ": group " << id << " of pool " << p << " destroyed";
    // "No capture joins the group any more": names of it lapse.
    for (auto& [s, gid] : pending_[static_cast<std::size_t>(p)])
      if (gid == id) gid = 0;
    if (any_live)
      ++cov_.group_destroy_before;
    else
      ++cov_.group_destroy_after;
    // A second destroy: refused, nothing changed.
    expect_refused([&] { return pool(p).destroy_graph_share_group(id); }, "second destroy of a group");
    check(any_live ? "group destroyed before its members" : "group destroyed after its members");
    return true;
  }

  template <class F>
  void expect_refused(F call, const char* what) {
    INFO(where() << ": " << what);
    for (int p = 0; p < 2; ++p) (void)pool(p).graph_memory_stats();  // collect releases first
    std::array<PoolStats, 2> before{pool(0).stats(), pool(1).stats()};
    CHECK(call() == cudaErrorInvalidValue);
    for (int p = 0; p < 2; ++p) {
      const PoolStats after = pool(p).stats();
      const PoolStats& b = before[static_cast<std::size_t>(p)];
      CHECK(after.used_current == b.used_current);
      CHECK(after.live_blocks == b.live_blocks);
      CHECK(after.graph_held_bytes == b.graph_held_bytes);
      CHECK(after.graph_held_blocks == b.graph_held_blocks);
      CHECK(after.graphs == b.graphs);
    }
    ++cov_.bad_inputs;
  }

  void bad_input() {
    const int p = static_cast<int>(pick(2));
    Pool& pl = pool(p);
    std::uint64_t max_id = 0;
    for (const Grp& g : groups_[static_cast<std::size_t>(p)]) max_id = std::max(max_id, g.id);
    const std::uint64_t other_max = [&] {
      std::uint64_t m = 0;
      for (const Grp& g : groups_[static_cast<std::size_t>(1 - p)]) m = std::max(m, g.id);
      return m;
    }();
    std::vector<std::uint64_t> destroyed;
    for (const Grp& g : groups_[static_cast<std::size_t>(p)])
      if (g.destroyed) destroyed.push_back(g.id);
    const cudaStream_t s = cap_[pick(cap_.size())];
    switch (pick(7)) {
      case 0:
        expect_refused([&] { return pl.destroy_graph_share_group(0); }, "destroy of group 0");
        break;
      case 1:
        expect_refused([&] { return pl.destroy_graph_share_group(max_id + 1 + pick(5)); }, "destroy of an id never made");
        break;
      case 2:
        if (other_max > max_id)  // an id of the other pool's only
          expect_refused([&] { return pl.destroy_graph_share_group(other_max); }, "destroy of another pool's id");
        else
          expect_refused([&] { return pl.create_graph_share_group(nullptr); }, "create into nullptr");
        break;
      case 3: {
        const std::vector<std::uint64_t> open = open_groups(p);
        const std::uint64_t id = open.empty() ? 0 : open[pick(open.size())];
        if (id == 0) break;
        expect_refused([&] { return pl.capture_into_share_group(nullptr, id); }, "capture_into on the legacy stream");
        expect_refused([&] { return pl.capture_into_share_group(cudaStreamLegacy, id); },
                       "capture_into on cudaStreamLegacy");
        break;
      }
      case 4:
        // A bad id leaves an earlier name of the stream as it was.
        expect_refused([&] { return pl.capture_into_share_group(s, max_id + 7); }, "capture_into an id never made");
        break;
      case 5:
        if (!destroyed.empty()) {
          const std::uint64_t id = destroyed[pick(destroyed.size())];
          expect_refused([&] { return pl.destroy_graph_share_group(id); }, "destroy of a destroyed group");
          expect_refused([&] { return pl.capture_into_share_group(s, id); }, "capture_into a destroyed group");
        }
        break;
      default:
        expect_refused([&] { return pl.create_graph_share_group(nullptr); }, "create into nullptr");
        break;
    }
    check("bad input refused");
  }

  // An allocation of the open capture `c` on stream `x` of pool `p`.
  int allocate_in_capture(int c, cudaStream_t x, int p) {
    Gr& g = graphs_[static_cast<std::size_t>(c)];
    if (!g.allocated[static_cast<std::size_t>(p)]) {
      // The first allocation from `p`: the name of `x`, if any, is taken.
      auto& names = pending_[static_cast<std::size_t>(p)];
      auto it = names.find(x);
      if (it != names.end() && it->second != 0) {
        g.group[static_cast<std::size_t>(p)] = it->second;
        group(p, it->second)->members.push_back(c);
        ++cov_.member_captures;
        if (g.streams.size() > 1) ++cov_.forked_members;
      }
      if (it != names.end()) names.erase(it);
      g.allocated[static_cast<std::size_t>(p)] = true;
    }
    refresh();
    const std::size_t n = (1 + pick(8)) * kMiB;
    void* ptr = nullptr;
    {
      INFO(where() << ": allocation of " << n << " in capture " << c << " from pool " << p);
      REQUIRE(pool(p).try_allocate(&ptr, n, x) == cudaSuccess);
      REQUIRE(ptr != nullptr);
    }
    Rec r;
    r.pool = p;
    r.p = reinterpret_cast<std::uintptr_t>(ptr);
    r.n = n;
    r.graph = c;
    r.alloc_on = x;
    r.base = next_base_++;
    recs_.push_back(r);
    const int ri = static_cast<int>(recs_.size() - 1);
    trace_ << "\n" << step_ << ": g" << c << " alloc rec " << ri << " pool " << p << " @" << (r.p - pool(p).va_base()) / kMiB
           << " +" << n / kMiB << " s" << sidx(x) << " group " << g.group[static_cast<std::size_t>(p)];
    check_new_block(recs_.back(), c);
    g.recs.push_back(ri);
    // The kernel: writes this launch's byte into the block.
    std::atomic<unsigned>* k = g.launches.get();
    const unsigned base = r.base;
    sim_.launch(x, [ptr, n, k, base] { fill_bytes(ptr, n, tag_of(base, k->load())); });
    return ri;
  }

  // The capture frees its block `ri` on `on` (its allocating stream, or the
  // origin after the join), after a kernel there checked it.
  void free_in_capture(int ri, cudaStream_t on) {
    Rec& r = recs_[static_cast<std::size_t>(ri)];
    Gr& g = graphs_[static_cast<std::size_t>(r.graph)];
    void* ptr = reinterpret_cast<void*>(r.p);
    const std::size_t n = r.n;
    std::atomic<unsigned>* k = g.launches.get();
    const unsigned base = r.base;
    std::atomic<unsigned>* bad = bad_.get();
    sim_.launch(on, [ptr, n, k, base, bad] {
      if (!all_bytes(ptr, n, tag_of(base, k->load()))) bad->fetch_add(1);
    });
    REQUIRE(pool(r.pool).try_deallocate(ptr, on) == cudaSuccess);
    trace_ << "\n" << step_ << ": g" << r.graph << " free rec " << ri << " s" << sidx(on);
    r.occupied = false;
    r.freed_on = on;
  }

  std::vector<int> caller_outputs(bool graph_unreleased) {
    std::vector<int> out;
    for (std::size_t i = 0; i < recs_.size(); ++i) {
      const Rec& r = recs_[i];
      if (r.graph < 0 || !caller_live(r)) continue;
      if (graph_unreleased != !graphs_[static_cast<std::size_t>(r.graph)].released) continue;
      out.push_back(static_cast<int>(i));
    }
    return out;
  }

  void capture() {
    const int c = static_cast<int>(graphs_.size());
    graphs_.emplace_back();
    std::vector<cudaStream_t> order = cap_;
    std::shuffle(order.begin(), order.end(), rng_);
    const std::size_t sides = pick(3);
    const cudaStream_t origin = order[0];
    std::vector<cudaStream_t> streams(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(1 + sides));
    // The stream of the first allocation from each pool, chosen up front so
    // that the program can name it.
    std::array<cudaStream_t, 2> first{{streams[pick(streams.size())], streams[pick(streams.size())]}};
    const int first_pool = static_cast<int>(pick(2));
    const bool both_pools = coin(0.3);
    for (int p = 0; p < 2; ++p) {
      if (p != first_pool && !both_pools) continue;
      const std::vector<std::uint64_t> open = open_groups(p);
      const std::size_t a = pick(10);
      if (a < 6 && !open.empty()) {
        const std::uint64_t id = open[pick(open.size())];
        REQUIRE(pool(p).capture_into_share_group(first[static_cast<std::size_t>(p)], id) == cudaSuccess);
        pending_[static_cast<std::size_t>(p)][first[static_cast<std::size_t>(p)]] = id;
      } else if (a < 8 && !open.empty()) {
        // A decoy: a stream this capture does not allocate on first. The
        // name waits for a capture whose first allocation is there.
        const cudaStream_t z = order[3];
        const std::uint64_t id = open[pick(open.size())];
        REQUIRE(pool(p).capture_into_share_group(z, id) == cudaSuccess);
        pending_[static_cast<std::size_t>(p)][z] = id;
        ++cov_.decoys;
      } else if (a < 9) {
        // Cancel whatever was named for the stream.
        REQUIRE(pool(p).capture_into_share_group(first[static_cast<std::size_t>(p)], 0) == cudaSuccess);
        pending_[static_cast<std::size_t>(p)].erase(first[static_cast<std::size_t>(p)]);
        ++cov_.cancels;
      }
    }
    const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                           cudaStreamCaptureModeRelaxed};
    REQUIRE(sim_.begin_capture(origin, modes[pick(3)]) == cudaSuccess);
    Gr& g = graphs_.back();
    g.open = true;
    g.id = capture_info(sim_, origin).id;
    g.streams = streams;
    ++cov_.captures;
    {
      std::atomic<unsigned>* k = g.launches.get();
      sim_.launch(origin, [k] { k->fetch_add(1); });  // the launch's number, before every other node
    }
    if (sides > 0) {
      REQUIRE(sim_.event_record(fork_, origin) == cudaSuccess);
      for (std::size_t i = 1; i <= sides; ++i) REQUIRE(sim_.stream_wait_event(streams[i], fork_) == cudaSuccess);
    }
    // The first allocation(s) on the chosen streams.
    allocate_in_capture(c, first[static_cast<std::size_t>(first_pool)], first_pool);
    if (both_pools) {
      allocate_in_capture(c, first[static_cast<std::size_t>(1 - first_pool)], 1 - first_pool);
      ++cov_.two_pool_captures;
    }
    const std::size_t ops = 2 + pick(8);
    for (std::size_t i = 0; i < ops; ++i) {
      const cudaStream_t x = streams[pick(streams.size())];
      const std::size_t op = pick(20);
      std::vector<int> mine;  // blocks of this capture allocated on x, not freed
      for (int ri : graphs_[static_cast<std::size_t>(c)].recs) {
        const Rec& r = recs_[static_cast<std::size_t>(ri)];
        if (r.occupied && r.alloc_on == x) mine.push_back(ri);
      }
      if (op < 10 || mine.empty()) {
        const int p = both_pools ? static_cast<int>(pick(2)) : first_pool;
        allocate_in_capture(c, x, p);
        check("allocation in capture");
      } else if (op < 16) {
        free_in_capture(mine[pick(mine.size())], x);
        check("free in capture");
      } else if (op < 18) {
        // The caller frees an output of an ended graph, under this capture.
        // Only of a pool the capture allocated from already: the model does
        // not follow which capture a name reaches when a capture's first call
        // of a pool is a free (the case "a capture that only frees" below).
        std::vector<int> outs;
        for (int ri : caller_outputs(true))
          if (graphs_[static_cast<std::size_t>(c)].allocated[static_cast<std::size_t>(recs_[static_cast<std::size_t>(ri)].pool)])
            outs.push_back(ri);
        if (outs.empty()) continue;
        Rec& r = recs_[static_cast<std::size_t>(outs[pick(outs.size())])];
        REQUIRE(pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), x) == cudaSuccess);
        r.caller_freed = true;
        r.freed_under = c;
        trace_ << "\n" << step_ << ": caller free of g" << r.graph << "'s output under g" << c;
        ++cov_.outputs_freed_under_capture;
        check("an output of another graph freed under the capture");
      } else {
        // A free of a block allocated before the capture (a released graph's
        // output, or an eager block): refused, the capture stays valid.
        std::vector<int> before;
        for (std::size_t j = 0; j < recs_.size(); ++j) {
          const Rec& r = recs_[j];
          if (!caller_live(r) || (r.graph >= 0 && !graphs_[static_cast<std::size_t>(r.graph)].released)) continue;
          before.push_back(static_cast<int>(j));
        }
        if (before.empty()) continue;
        const Rec& r = recs_[static_cast<std::size_t>(before[pick(before.size())])];
        INFO(where() << ": block of " << describe(r.graph) << " +" << r.n);
        CHECK(pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), x) == cudaErrorStreamCaptureUnsupported);
        check("free under capture of a block from before it refused");
      }
    }
    if (sides > 0) {
      for (std::size_t i = 1; i <= sides; ++i) {
        REQUIRE(sim_.event_record(join_[i - 1], streams[i]) == cudaSuccess);
        REQUIRE(sim_.stream_wait_event(origin, join_[i - 1]) == cudaSuccess);
      }
      // After the join, some sides' blocks freed on the origin.
      for (int ri : std::vector<int>(graphs_[static_cast<std::size_t>(c)].recs)) {
        const Rec& r = recs_[static_cast<std::size_t>(ri)];
        if (r.occupied && r.alloc_on != origin && coin(0.3)) {
          free_in_capture(ri, origin);
          check("side's block freed on the origin after the join");
        }
      }
    }
    Gr& gm = graphs_[static_cast<std::size_t>(c)];
    cudaGraph_t graph = nullptr;
    if (coin(0.08)) {
      // Invalidated: a query of the capturing stream. Its graph is released
      // at the end; what it handed out is the caller's.
      CHECK(sim_.stream_query(origin) == cudaErrorStreamCaptureUnsupported);
      CHECK(sim_.end_capture(origin, &graph) == cudaErrorStreamCaptureInvalidated);
      gm.open = false;
      gm.ended = true;
      gm.invalidated = true;
      gm.released = true;
      trace_ << "\n" << step_ << ": g" << c << " invalidated, released";
      ++cov_.invalidated;
      for (int ri : gm.recs)
        if (recs_[static_cast<std::size_t>(ri)].occupied) ++cov_.outputs;
      check("invalidated capture ended: released");
      return;
    }
    REQUIRE(sim_.end_capture(origin, &graph) == cudaSuccess);
    REQUIRE(graph != nullptr);
    gm.open = false;
    gm.ended = true;
    gm.graph = graph;
    gm.graph_alive = true;
    for (int ri : gm.recs) {
      Rec& r = recs_[static_cast<std::size_t>(ri)];
      if (!r.occupied) continue;
      ++cov_.outputs;
      if (r.at_risk) ++cov_.at_risk_outputs;
    }
    check("capture ended");
  }

  void settle(int g) {
    REQUIRE(sim_.stream_synchronize(launch_) == cudaSuccess);
    Gr& gm = graphs_[static_cast<std::size_t>(g)];
    if (!gm.graph_alive && gm.execs.empty() && !gm.released) {
      gm.released = true;
      trace_ << "\n" << step_ << ": g" << g << " released";
    }
  }

  std::vector<int> graphs_where(bool (*pred)(const Gr&)) const {
    std::vector<int> out;
    for (std::size_t g = 0; g < graphs_.size(); ++g)
      if (pred(graphs_[g])) out.push_back(static_cast<int>(g));
    return out;
  }

  bool instantiate() {
    const std::vector<int> c = graphs_where([](const Gr& g) { return g.graph_alive && g.execs.size() < 2; });
    if (c.empty()) return false;
    Gr& g = graphs_[static_cast<std::size_t>(c[pick(c.size())])];
    cudaGraphExec_t e = nullptr;
    REQUIRE(sim_.graph_instantiate(&e, g.graph) == cudaSuccess);
    g.execs.push_back(e);
    check("instantiated");
    return true;
  }

  bool launch() {
    const std::vector<int> c = graphs_where([](const Gr& g) { return !g.execs.empty(); });
    if (c.empty()) return false;
    Gr& g = graphs_[static_cast<std::size_t>(c[pick(c.size())])];
    const std::size_t n = 1 + pick(2);
    // One at a time, on one stream: the promise of a group.
    for (std::size_t i = 0; i < n; ++i) REQUIRE(sim_.graph_launch(g.execs[pick(g.execs.size())], launch_) == cudaSuccess);
    cov_.launches += n;
    check_contents("after a launch: every output the caller holds intact");
    check("launched");
    return true;
  }

  bool destroy_graph() {
    const std::vector<int> c = graphs_where([](const Gr& g) { return g.graph_alive; });
    if (c.empty()) return false;
    const int g = c[pick(c.size())];
    REQUIRE(sim_.graph_destroy(graphs_[static_cast<std::size_t>(g)].graph) == cudaSuccess);
    graphs_[static_cast<std::size_t>(g)].graph_alive = false;
    settle(g);
    check("graph destroyed");
    return true;
  }

  bool destroy_exec() {
    const std::vector<int> c = graphs_where([](const Gr& g) { return !g.execs.empty(); });
    if (c.empty()) return false;
    const int g = c[pick(c.size())];
    Gr& gm = graphs_[static_cast<std::size_t>(g)];
    const std::size_t w = pick(gm.execs.size());
    REQUIRE(sim_.graph_exec_destroy(gm.execs[w]) == cudaSuccess);
    gm.execs.erase(gm.execs.begin() + static_cast<std::ptrdiff_t>(w));
    settle(g);
    check("executable destroyed");
    return true;
  }

  cudaStream_t any_stream() {
    std::vector<cudaStream_t> all = cap_;
    all.push_back(eager_);
    all.push_back(launch_);
    return all[pick(all.size())];
  }

  bool free_output_outside() {
    std::vector<int> outs = caller_outputs(true);
    for (int i : caller_outputs(false)) outs.push_back(i);
    if (outs.empty()) return false;
    Rec& r = recs_[static_cast<std::size_t>(outs[pick(outs.size())])];
    const cudaStream_t s = any_stream();
    REQUIRE(pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), s) == cudaSuccess);
    const bool was_held = held(r);
    trace_ << "\n" << step_ << ": caller free of g" << r.graph << "'s output s" << sidx(s);
    r.caller_freed = true;
    if (!was_held) r.gone = true;
    ++cov_.outputs_freed_outside;
    check("the caller's free of an output");
    return true;
  }

  bool double_free() {
    std::vector<int> c;
    for (std::size_t i = 0; i < recs_.size(); ++i) {
      const Rec& r = recs_[i];
      if (!r.gone && r.graph >= 0 && r.occupied && r.caller_freed && held(r)) c.push_back(static_cast<int>(i));
    }
    if (c.empty()) return false;
    const Rec& r = recs_[static_cast<std::size_t>(c[pick(c.size())])];
    expect_refused([&] { return pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), eager_); },
                   "a second free of an output");
    ++cov_.double_frees;
    check("a second free of an output refused");
    return true;
  }

  void eager_allocate() {
    const int p = static_cast<int>(pick(2));
    refresh();
    const std::size_t n = (1 + pick(4)) * kMiB;
    void* ptr = nullptr;
    REQUIRE(pool(p).try_allocate(&ptr, n, eager_) == cudaSuccess);
    Rec r;
    r.pool = p;
    r.p = reinterpret_cast<std::uintptr_t>(ptr);
    r.n = n;
    r.alloc_on = eager_;
    r.base = next_base_++;
    recs_.push_back(r);
    check_new_block(recs_.back(), -1);
    const unsigned char b = tag_of(r.base, 0);
    sim_.launch(eager_, [ptr, n, b] { fill_bytes(ptr, n, b); });
    check("eager allocation");
  }

  bool eager_free() {
    std::vector<int> c;
    for (std::size_t i = 0; i < recs_.size(); ++i)
      if (recs_[i].graph < 0 && !recs_[i].gone) c.push_back(static_cast<int>(i));
    if (c.empty()) return false;
    Rec& r = recs_[static_cast<std::size_t>(c[pick(c.size())])];
    REQUIRE(pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), eager_) == cudaSuccess);
    r.gone = true;
    check("eager free");
    return true;
  }

  void one_step() {
    for (;;) {
      const std::size_t a = pick(100);
      if (a < 26) {
        capture();
        return;
      }
      if (a < 34) {
        if (instantiate()) return;
      } else if (a < 48) {
        if (launch()) return;
      } else if (a < 56) {
        if (destroy_graph()) return;
      } else if (a < 62) {
        if (destroy_exec()) return;
      } else if (a < 71) {
        if (free_output_outside()) return;
      } else if (a < 74) {
        if (double_free()) return;
      } else if (a < 78) {
        create_group(static_cast<int>(pick(2)));
        check("group created");
        return;
      } else if (a < 82) {
        if (destroy_group()) return;
      } else if (a < 88) {
        bad_input();
        return;
      } else if (a < 94) {
        eager_allocate();
        return;
      } else {
        if (eager_free()) return;
      }
    }
  }

  void finish() {
    step_ = -1;
    check_contents("finish: before the teardown");
    std::vector<int> order;
    for (std::size_t g = 0; g < graphs_.size(); ++g) order.push_back(static_cast<int>(g));
    std::shuffle(order.begin(), order.end(), rng_);
    // Groups destroyed at a random point of the graphs' teardown.
    const std::size_t groups_at = pick(order.size() + 1);
    auto destroy_groups = [&] {
      for (int p = 0; p < 2; ++p)
        for (Grp& g : groups_[static_cast<std::size_t>(p)])
          if (!g.destroyed) {
            const std::uint64_t before = pool(p).graph_memory_stats().held_bytes;
            REQUIRE(pool(p).destroy_graph_share_group(g.id) == cudaSuccess);
            if (g.members.empty()) {
              INFO(where() << ": pool " << p << ", group " << g.id << " no capture joined (the model)");
              CHECK(pool(p).graph_memory_stats().held_bytes == before);
            }
            g.destroyed = true;
            trace_ << "\n" << step_ << ": group " << g.id << " of pool " << p << " destroyed";
          }
      check("finish: groups destroyed");
    };
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i == groups_at) destroy_groups();
      Gr& gm = graphs_[static_cast<std::size_t>(order[i])];
      for (cudaGraphExec_t e : gm.execs) REQUIRE(sim_.graph_exec_destroy(e) == cudaSuccess);
      gm.execs.clear();
      if (gm.graph_alive) REQUIRE(sim_.graph_destroy(gm.graph) == cudaSuccess);
      gm.graph_alive = false;
      settle(order[i]);
      check("finish: graph " + std::to_string(order[i]) + " released");
    }
    if (groups_at >= order.size()) destroy_groups();
    check_contents("finish: every graph released, the outputs the caller holds intact");
    INFO("seed " << seed_);
    for (int p = 0; p < 2; ++p) {
      INFO("pool " << p);
      std::uint64_t live = 0, live_blocks = 0;
      for (const Rec& r : recs_)
        if (r.pool == p && !r.gone) {
          CHECK(caller_live(r));
          live += r.n;
          live_blocks += 1;
        }
      const GraphMemoryStats st = pool(p).graph_memory_stats();
      CHECK(st.held_bytes == 0);
      CHECK(st.held_blocks == 0);
      CHECK(st.graphs == 0);
      CHECK(pool(p).graph_memory_snapshot().empty());
      CHECK(pool(p).stats().used_current == live);
      CHECK(pool(p).stats().live_blocks == live_blocks);
    }
    for (Rec& r : recs_) {
      if (r.gone) continue;
      REQUIRE(pool(r.pool).try_deallocate(reinterpret_cast<void*>(r.p), any_stream()) == cudaSuccess);
      r.gone = true;
    }
    for (int p = 0; p < 2; ++p) {
      CHECK(pool(p).stats().used_current == 0);
      CHECK(pool(p).stats().live_blocks == 0);
      pool(p).check_invariants();
    }
    CHECK(sim_.live_graphs() == 0);
    CHECK(sim_.live_graph_execs() == 0);
  }

  std::uint32_t seed_;
  std::mt19937 rng_;
  SimDriver sim_;
  std::array<std::unique_ptr<Pool>, 2> pools_;
  std::vector<cudaStream_t> cap_;
  cudaStream_t eager_ = nullptr, launch_ = nullptr;
  EventHandle fork_ = nullptr;
  std::array<EventHandle, 2> join_{{nullptr, nullptr}};
  std::vector<Rec> recs_;
  std::vector<Gr> graphs_;
  std::array<std::vector<Grp>, 2> groups_;
  std::array<std::map<cudaStream_t, std::uint64_t>, 2> pending_;
  std::unique_ptr<std::atomic<unsigned>> bad_ = std::make_unique<std::atomic<unsigned>>(0);
  unsigned next_base_ = 1;
  std::ostringstream trace_;
  int sidx(cudaStream_t x) const {
    for (std::size_t i = 0; i < cap_.size(); ++i)
      if (cap_[i] == x) return static_cast<int>(i);
    return x == eager_ ? 8 : x == launch_ ? 9 : -1;
  }
  int step_ = 0;
  Coverage cov_;
};

}  // namespace

TEST_CASE("share groups scenario: random programs of captures, groups and launches against the documented model",
          "[scenario][share_groups]") {
  Coverage all;
  for (std::uint32_t seed : {1u, 20261202u, 77u, 4096u, 31337u, 9001u, 5u, 123457u, 2718u, 8080u, 65537u, 424242u}) {
    INFO("seed " << seed);
    Scenario scenario(seed);
    scenario.run(90);
    all.add(scenario.coverage());
  }
  // Each kind of step happened over the seeds.
  CHECK(all.captures > 0);
  CHECK(all.member_captures > 0);
  CHECK(all.forked_members > 0);
  CHECK(all.group_reuse > 0);
  CHECK(all.own_reuse > 0);
  CHECK(all.decoys > 0);
  CHECK(all.cancels > 0);
  CHECK(all.outputs > 0);
  CHECK(all.outputs_freed_outside > 0);
  CHECK(all.outputs_freed_under_capture > 0);
  CHECK(all.double_frees > 0);
  CHECK(all.launches > 0);
  CHECK(all.output_checks > 0);
  CHECK(all.group_destroy_before > 0);
  CHECK(all.group_destroy_after > 0);
  CHECK(all.invalidated > 0);
  CHECK(all.bad_inputs > 0);
  CHECK(all.two_pool_captures > 0);
  // The ambiguous cases, reported rather than asserted (docs/graphs.md says
  // nothing of them): an output placed on another member's scratch, and its
  // bytes overwritten by that member's launch.
  WARN("ambiguous overlaps " << all.ambiguous_overlaps << ", outputs on another member's scratch "
                             << all.at_risk_outputs << ", of which overwritten by a launch "
                             << all.ambiguous_clobbers);
}

namespace {

struct Fixture {
  SimDriver sim{small_sim(std::size_t{1} << 30)};
  Pool pool{options_on(sim)};
  cudaStream_t s = sim.create_stream();
  cudaStream_t s2 = sim.create_stream();
  cudaStream_t s3 = sim.create_stream();
  cudaStream_t launch = sim.create_stream();
  ~Fixture() { sim.stream_synchronize(launch); }
  std::uint64_t held() { return pool.graph_memory_stats().held_bytes; }
  std::uint64_t used() { return pool.stats().used_current; }
  std::uint64_t new_group() {
    std::uint64_t g = 0;
    REQUIRE(pool.create_graph_share_group(&g) == cudaSuccess);
    REQUIRE(g != 0);
    return g;
  }
};

}  // namespace

// An invalidated capture: its output freed under another capture (refused, as
// for any block from before the capture), then by the caller outside capture
// (accepted once); its scratch held by the group, if a member, until the
// group is destroyed.
void invalidated_capture(bool member) {
  // docs/graphs.md, "Semantics": "A capture that was invalidated releases its
  // graph at cudaStreamEndCapture, so its memory comes back the same way; what
  // it handed out is the caller's to free like any other block" — and such a
  // block "stays allocated, an ordinary block of the pool, until the caller
  // frees it (on any stream; once; under a capture that free is then refused
  // with cudaErrorStreamCaptureUnsupported, as for any block allocated before
  // the capture)". "What is shared": the group holds the blocks freed in its
  // members' captures until it is destroyed and every member is released.
  Fixture f;
  const std::uint64_t g = f.new_group();
  if (member) REQUIRE(f.pool.capture_into_share_group(f.s, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* scratch = f.pool.allocate(4 * kMiB, f.s);
  f.pool.deallocate(scratch, f.s);
  void* out = f.pool.allocate(3 * kMiB, f.s);
  CHECK(f.sim.stream_query(f.s) == cudaErrorStreamCaptureUnsupported);  // invalidates the capture
  cudaGraph_t graph = nullptr;
  CHECK(f.sim.end_capture(f.s, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(f.held() == (member ? 4 * kMiB : 0));
  if (!member) CHECK(f.used() == 3 * kMiB);  // (for a member: whether used counts the group's 4 MiB is not said)
  CHECK(f.pool.block_size(out) == 3 * kMiB);  // a live block, the caller's
  // The output is the caller's: a free under a capture is refused.
  REQUIRE(f.sim.begin_capture(f.s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s2) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t other = nullptr;
  REQUIRE(f.sim.end_capture(f.s2, &other) == cudaSuccess);  // still valid
  REQUIRE(f.sim.graph_destroy(other) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s3) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s3) == cudaErrorInvalidValue);
  REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == 0);
  f.pool.check_invariants();
}

TEST_CASE("share groups scenario: an invalidated capture's output is the caller's (no group)",
          "[scenario][share_groups]") {
  invalidated_capture(false);
}

// For a member, the invalidated capture's output lies on the block of the
// scratch the capture freed before it (the group's), and is still "the
// caller's to free like any other block" (docs/graphs.md, "Semantics", "When
// memory comes back": "A capture that was invalidated releases its graph at
// cudaStreamEndCapture ..."): a free of it under another capture is refused
// (cudaErrorStreamCaptureUnsupported), the caller's own free succeeds once.
// Before the fix the capture's free was accepted and the caller's refused.
TEST_CASE("share groups scenario: an invalidated member capture's output is the caller's, its scratch the group's",
          "[scenario][share_groups]") {
  invalidated_capture(true);
}
namespace {

// A group whose one member (captured on its own stream, alive) freed a 4 MiB
// block in its capture: a later member's 4 MiB allocation gets that block
// (the only group block, an exact fit); a capture outside the group gets new
// memory. What each probe capture got says whether it joined.
struct JoinProbe {
  Fixture f;
  std::uint64_t group = 0;
  void* shared = nullptr;
  cudaStream_t own = f.sim.create_stream();
  cudaStream_t side = f.sim.create_stream();
  std::vector<cudaGraph_t> graphs;
  EventHandle fork = nullptr, join = nullptr;
  JoinProbe() {
    group = f.new_group();
    REQUIRE(f.pool.capture_into_share_group(own, group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(own, cudaStreamCaptureModeGlobal) == cudaSuccess);
    shared = f.pool.allocate(4 * kMiB, own);
    f.pool.deallocate(shared, own);
    end(own);
    REQUIRE(f.sim.event_create(&fork) == cudaSuccess);
    REQUIRE(f.sim.event_create(&join) == cudaSuccess);
  }
  ~JoinProbe() {
    for (cudaGraph_t g : graphs) f.sim.graph_destroy(g);
    f.sim.event_destroy(fork);
    f.sim.event_destroy(join);
  }
  void end(cudaStream_t s) {
    cudaGraph_t g = nullptr;
    REQUIRE(f.sim.end_capture(s, &g) == cudaSuccess);
    graphs.push_back(g);
  }
  // A capture on `s` allocating (and freeing) 4 MiB: true when it got the group's block.
  bool joins(cudaStream_t s) {
    REQUIRE(f.sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* p = f.pool.allocate(4 * kMiB, s);
    f.pool.deallocate(p, s);
    end(s);
    return p == shared;
  }
};

}  // namespace

TEST_CASE("share groups scenario: which capture joins, by the stream of its first allocation",
          "[scenario][share_groups]") {
  // docs/graphs.md, "Joining": "names the group for the next capture whose
  // first allocation from the pool is on `stream` ... One capture per call
  // (name it again before each capture; group 0 cancels) ... In a capture
  // forked over several streams, name the stream of its first allocation."
  // "What is shared": a later allocation of any other member's capture
  // reuses a group block "(smallest fit first, on any of its streams)".
  JoinProbe j;
  Fixture& f = j.f;
  const cudaStream_t s1 = f.s, s2 = f.s2;
  SECTION("named s1, a capture on s2 does not join; the next capture on s1 does, once") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    CHECK_FALSE(j.joins(s2));
    CHECK(j.joins(s1));
    CHECK_FALSE(j.joins(s1));  // one capture per call
  }
  SECTION("group 0 cancels") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    REQUIRE(f.pool.capture_into_share_group(s1, 0) == cudaSuccess);
    CHECK_FALSE(j.joins(s1));
  }
  SECTION("0 on a stream never named is accepted") {
    CHECK(f.pool.capture_into_share_group(s2, 0) == cudaSuccess);
    CHECK_FALSE(j.joins(s2));
  }
  SECTION("naming again replaces the earlier name") {
    std::uint64_t other = j.f.new_group();
    REQUIRE(f.pool.capture_into_share_group(s1, other) == cudaSuccess);
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    CHECK(j.joins(s1));
  }
  SECTION("a refused call leaves the name as it was") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    CHECK(f.pool.capture_into_share_group(s1, j.group + 100) == cudaErrorInvalidValue);
    CHECK(j.joins(s1));
  }
  SECTION("eager work on the named stream does not take the name") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    void* e = f.pool.allocate(kMiB, s1);
    f.pool.deallocate(e, s1);
    CHECK(j.joins(s1));
  }
  SECTION("a capture that allocates nothing does not take the name") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
    f.sim.launch(s1, [] {});
    j.end(s1);
    CHECK(j.joins(s1));
  }
  SECTION("the group destroyed after naming: no capture joins it") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    REQUIRE(f.pool.destroy_graph_share_group(j.group) == cudaSuccess);
    CHECK_FALSE(j.joins(s1));
  }
  SECTION("forked: the stream of the first allocation named; the group's block reached from the other stream") {
    REQUIRE(f.pool.capture_into_share_group(j.side, j.group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
    REQUIRE(f.sim.event_record(j.fork, s1) == cudaSuccess);
    REQUIRE(f.sim.stream_wait_event(j.side, j.fork) == cudaSuccess);
    void* first = f.pool.allocate(6 * kMiB, j.side);  // the first allocation: on the named side stream (no fit)
    void* on_origin = f.pool.allocate(4 * kMiB, s1);
    CHECK(on_origin == j.shared);  // "on any of its streams"
    CHECK(first != nullptr);
    f.pool.deallocate(on_origin, s1);
    f.pool.deallocate(first, j.side);
    REQUIRE(f.sim.event_record(j.join, j.side) == cudaSuccess);
    REQUIRE(f.sim.stream_wait_event(s1, j.join) == cudaSuccess);
    j.end(s1);
  }
  SECTION("forked: the origin named, the first allocation on the side: not a member; the name waits") {
    REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
    REQUIRE(f.sim.event_record(j.fork, s1) == cudaSuccess);
    REQUIRE(f.sim.stream_wait_event(j.side, j.fork) == cudaSuccess);
    void* first = f.pool.allocate(4 * kMiB, j.side);
    void* on_origin = f.pool.allocate(4 * kMiB, s1);
    CHECK(first != j.shared);
    CHECK(on_origin != j.shared);
    f.pool.deallocate(on_origin, s1);
    f.pool.deallocate(first, j.side);
    REQUIRE(f.sim.event_record(j.join, j.side) == cudaSuccess);
    REQUIRE(f.sim.stream_wait_event(s1, j.join) == cudaSuccess);
    j.end(s1);
    // The literal reading ("the next capture whose first allocation ... is
    // on stream"): this capture did not use up the name of s1.
    CHECK(j.joins(s1));
  }
  CHECK(f.held() >= 4 * kMiB);
  f.pool.check_invariants();
}

// A capture on the named stream whose only call of the pool is a free (the
// caller's free of another graph's output) must not take the name nor join
// the group; the next capture on that stream, the first to allocate, does
// (it did not, before the fix). docs/graphs.md, "Joining": "names the group for the next
// capture whose first allocation from the pool is on `stream`". (Seen first in
// the random program: the group's blocks then stayed held until that
// free-only capture's graph, a member by mistake, was released.)
TEST_CASE("share groups scenario: a capture that only frees does not take the stream's name",
          "[scenario][share_groups]") {
  JoinProbe j;
  Fixture& f = j.f;
  const cudaStream_t s1 = f.s, s2 = f.s2;
  // Another graph's output, freed by the caller under a capture on the named
  // stream: that capture allocates nothing from the pool.
  REQUIRE(f.sim.begin_capture(s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* out = f.pool.allocate(2 * kMiB, s2);
  j.end(s2);
  REQUIRE(f.pool.capture_into_share_group(s1, j.group) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(s1, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(f.pool.try_deallocate(out, s1) == cudaSuccess);
  j.end(s1);
  CHECK(j.joins(s1));
  // Once the group is destroyed and its one member released, only what the
  // free-only capture holds (the output whose free it captured) stays held.
  REQUIRE(f.pool.destroy_graph_share_group(j.group) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(j.graphs[0]) == cudaSuccess);  // the member
  j.graphs.erase(j.graphs.begin());
  CHECK(f.held() <= 2 * kMiB + 4 * kMiB);  // out, and the last probe's 4 MiB while its graph lives
}

namespace {

// One graph of the 16: scratch allocated, kernels writing then checking it,
// the output allocated and written, the scratch freed (the order of the
// docs' example: tmp, out, produce(tmp), consume(tmp, out), free tmp).
struct Step {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  void* scratch = nullptr;
  void* out = nullptr;
  std::unique_ptr<std::atomic<unsigned>> launches = std::make_unique<std::atomic<unsigned>>(0);
};

}  // namespace

TEST_CASE("share groups scenario: 16 graphs of 8 MiB scratch on one stream hold one scratch plus the outputs",
          "[scenario][share_groups]") {
  // docs/graphs.md, "Graphs that never run at once": "the graphs of one group
  // share the memory their captures free, so they hold about what the
  // largest of them needs, not their sum"; "Tested ... 16 graphs of 8 MiB of
  // scratch each captured on one stream hold 128 MiB without a group and
  // 8 MiB with one". Here each also has a 1 MiB output, which is its own
  // ("outputs stay each graph's and the caller's") and intact across the
  // other members' launches, in random order.
  constexpr int kGraphs = 16;
  constexpr std::size_t kScratch = 8 * kMiB, kOut = kMiB;
  bool grouped = true;
  bool group_first = false;
  SECTION("in one group, the group destroyed after the graphs") {}
  SECTION("in one group, the group destroyed before the graphs") { group_first = true; }
  SECTION("without a group") { grouped = false; }
  CAPTURE(grouped, group_first);
  Fixture f;
  std::uint64_t group = 0;
  if (grouped) group = f.new_group();
  std::atomic<unsigned> bad{0};
  std::vector<Step> steps(kGraphs);
  for (int i = 0; i < kGraphs; ++i) {
    Step& st = steps[static_cast<std::size_t>(i)];
    if (grouped) REQUIRE(f.pool.capture_into_share_group(f.s, group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    std::atomic<unsigned>* k = st.launches.get();
    f.sim.launch(f.s, [k] { k->fetch_add(1); });
    st.scratch = f.pool.allocate(kScratch, f.s);
    st.out = f.pool.allocate(kOut, f.s);
    void* t = st.scratch;
    void* o = st.out;
    const unsigned base = static_cast<unsigned>(i) * 2u + 1u;
    f.sim.launch_touching(f.s, t, kScratch, true, [t, k, base] { fill_bytes(t, kScratch, tag_of(base, k->load())); });
    f.sim.launch_touching(f.s, t, kScratch, false, [t, o, k, base, &bad] {
      if (!all_bytes(t, kScratch, tag_of(base, k->load()))) bad.fetch_add(1);
      fill_bytes(o, kOut, tag_of(base + 1, k->load()));
    });
    f.pool.deallocate(st.scratch, f.s);
    REQUIRE(f.sim.end_capture(f.s, &st.graph) == cudaSuccess);
    REQUIRE(f.sim.graph_instantiate(&st.exec, st.graph) == cudaSuccess);
    if (grouped && i > 0) CHECK(st.scratch == steps[0].scratch);  // the group's block, an exact fit
  }
  const std::uint64_t want = grouped ? kScratch + kGraphs * kOut : kGraphs * (kScratch + kOut);
  CHECK(f.held() == want);
  // "The statistics count each block once; in the per-graph listing a block
  // several members used counts in each."
  {
    const GraphMemorySnapshot snap = f.pool.graph_memory_snapshot();
    CHECK(snap.size() == static_cast<std::size_t>(kGraphs));
    for (const GraphHolding& h : snap) {
      CHECK(h.held_bytes == kScratch + kOut);
      CHECK(h.held_blocks == 2);
      CHECK(h.output_bytes == kOut);
      CHECK(h.output_blocks == 1);
    }
  }
  // Launched a few times each, one at a time, in random order.
  std::mt19937 rng(20261202u);
  std::vector<int> order;
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < kGraphs; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  auto outputs_intact = [&] {
    REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
    CHECK(bad.load() == 0);
    for (int i = 0; i < kGraphs; ++i) {
      const Step& st = steps[static_cast<std::size_t>(i)];
      const unsigned k = st.launches->load();
      if (k == 0) continue;
      INFO("graph " << i << "'s output after " << k << " launches");
      CHECK(all_bytes(st.out, kOut, tag_of(static_cast<unsigned>(i) * 2u + 2u, k)));
    }
  };
  for (std::size_t n = 0; n < order.size(); ++n) {
    REQUIRE(f.sim.graph_launch(steps[static_cast<std::size_t>(order[n])].exec, f.launch) == cudaSuccess);
    if (n % 7 == 0) outputs_intact();
  }
  outputs_intact();
  CHECK(f.held() == want);
  CHECK(f.pool.graph_memory_stats().held_bytes_high == want);
  // The caller frees some outputs while their graphs live (memory stays with
  // the graph: relaunching is safe), on another stream.
  for (int i = 0; i < kGraphs; i += 3) f.pool.deallocate(steps[static_cast<std::size_t>(i)].out, f.s2);
  for (int i = 0; i < kGraphs; i += 3)
    CHECK(f.pool.try_deallocate(steps[static_cast<std::size_t>(i)].out, f.s3) == cudaErrorInvalidValue);
  CHECK(f.held() == want);
  for (int i = 0; i < kGraphs; ++i) REQUIRE(f.sim.graph_launch(steps[static_cast<std::size_t>(i)].exec, f.launch) == cudaSuccess);
  REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
  CHECK(bad.load() == 0);
  if (grouped && group_first) {
    REQUIRE(f.pool.destroy_graph_share_group(group) == cudaSuccess);
    CHECK(f.held() == want);  // the members still hold it
    CHECK(f.pool.destroy_graph_share_group(group) == cudaErrorInvalidValue);
  }
  // Released one by one: without a group each takes its memory back; in a
  // group the scratch stays until the group is destroyed and every member is released.
  std::uint64_t live_outputs = 0;
  for (int i = 0; i < kGraphs; ++i)
    if (i % 3 != 0) live_outputs += kOut;
  for (int i = 0; i < kGraphs; ++i) {
    Step& st = steps[static_cast<std::size_t>(i)];
    REQUIRE(f.sim.graph_exec_destroy(st.exec) == cudaSuccess);
    REQUIRE(f.sim.graph_destroy(st.graph) == cudaSuccess);
    const std::uint64_t left = static_cast<std::uint64_t>(kGraphs - 1 - i);
    INFO("after graph " << i << " released");
    if (!grouped)
      CHECK(f.held() == left * (kScratch + kOut));
    else if (i + 1 < kGraphs || !group_first)
      CHECK(f.held() == kScratch + left * kOut);
  }
  if (grouped && !group_first) {
    CHECK(f.held() == kScratch);  // every member released, the group alive: it holds its block
    REQUIRE(f.pool.destroy_graph_share_group(group) == cudaSuccess);
  }
  CHECK(f.held() == 0);
  CHECK(f.pool.graph_memory_stats().held_blocks == 0);
  CHECK(f.pool.graph_memory_snapshot().empty());
  CHECK(f.used() == live_outputs);  // the outputs the caller still holds
  // Their bytes: what the last launch wrote.
  for (int i = 0; i < kGraphs; ++i) {
    if (i % 3 == 0) continue;
    const Step& st = steps[static_cast<std::size_t>(i)];
    CHECK(all_bytes(st.out, kOut, tag_of(static_cast<unsigned>(i) * 2u + 2u, st.launches->load())));
    f.pool.deallocate(st.out, f.s3);
  }
  CHECK(f.used() == 0);
  f.pool.check_invariants();
}

TEST_CASE("share groups scenario: bad input is refused and changes nothing", "[scenario][share_groups]") {
  // docs/graphs.md, "Bad input": "A group id that names no group of the pool
  // not yet destroyed, a null pointer, the legacy stream, a bad pool handle:
  // cudaErrorInvalidValue, nothing changed. Group ids are never reused in a
  // pool." pool.hpp: create "ids from 1".
  Fixture f;
  Pool other(options_on(f.sim));
  std::uint64_t g1 = 0, g2 = 0, o1 = 0, o2 = 0, o3 = 0;
  REQUIRE(f.pool.create_graph_share_group(&g1) == cudaSuccess);
  REQUIRE(f.pool.create_graph_share_group(&g2) == cudaSuccess);
  CHECK(g1 == 1);
  CHECK(g2 > g1);
  REQUIRE(other.create_graph_share_group(&o1) == cudaSuccess);
  REQUIRE(other.create_graph_share_group(&o2) == cudaSuccess);
  REQUIRE(other.create_graph_share_group(&o3) == cudaSuccess);
  CHECK(o1 == 1);
  // A member holding a block, so that "nothing changed" has something to keep.
  REQUIRE(f.pool.capture_into_share_group(f.s, g1) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = f.pool.allocate(4 * kMiB, f.s);
  void* out = f.pool.allocate(kMiB, f.s);
  f.pool.deallocate(t, f.s);
  cudaGraph_t graph = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &graph) == cudaSuccess);
  // A name left for s2, which the refusals must not disturb.
  REQUIRE(f.pool.capture_into_share_group(f.s2, g1) == cudaSuccess);
  const PoolStats before = f.pool.stats();
  const GraphMemoryStats gbefore = f.pool.graph_memory_stats();
  std::uint64_t untouched = 0xDEADBEEF;
  auto refused = [&](cudaError_t e, const char* what) {
    INFO(what);
    CHECK(e == cudaErrorInvalidValue);
    const PoolStats after = f.pool.stats();
    CHECK(after.used_current == before.used_current);
    CHECK(after.live_blocks == before.live_blocks);
    CHECK(after.graph_held_bytes == before.graph_held_bytes);
    CHECK(f.pool.graph_memory_stats().held_bytes == gbefore.held_bytes);
    CHECK(f.pool.graph_memory_stats().graphs == gbefore.graphs);
  };
  refused(f.pool.create_graph_share_group(nullptr), "create into nullptr");
  refused(f.pool.destroy_graph_share_group(0), "destroy 0");
  refused(f.pool.destroy_graph_share_group(g2 + 1), "destroy an id not yet made");
  refused(f.pool.destroy_graph_share_group(o3), "destroy an id of the other pool's only");
  refused(f.pool.destroy_graph_share_group(~std::uint64_t{0}), "destroy ~0");
  refused(f.pool.capture_into_share_group(nullptr, g1), "capture_into the legacy stream (0)");
  refused(f.pool.capture_into_share_group(cudaStreamLegacy, g1), "capture_into cudaStreamLegacy");
  refused(f.pool.capture_into_share_group(nullptr, 0), "cancel on the legacy stream");
  refused(f.pool.capture_into_share_group(f.s2, g2 + 5), "capture_into an id not yet made");
  refused(f.pool.capture_into_share_group(f.s2, o3), "capture_into an id of the other pool's only");
  REQUIRE(f.pool.destroy_graph_share_group(g2) == cudaSuccess);
  refused(f.pool.destroy_graph_share_group(g2), "destroy twice");
  refused(f.pool.capture_into_share_group(f.s2, g2), "capture_into a destroyed group");
  CHECK(untouched == 0xDEADBEEF);
  // Ids are never reused, whatever was destroyed.
  std::uint64_t g3 = 0;
  REQUIRE(f.pool.create_graph_share_group(&g3) == cudaSuccess);
  CHECK(g3 > g2);
  // The name left for s2 still stands: its next capture joins g1 and gets
  // the group's 4 MiB block.
  REQUIRE(f.sim.begin_capture(f.s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = f.pool.allocate(4 * kMiB, f.s2);
  CHECK(p == t);
  f.pool.deallocate(p, f.s2);
  cudaGraph_t g = nullptr;
  REQUIRE(f.sim.end_capture(f.s2, &g) == cudaSuccess);
  CHECK(f.held() == 5 * kMiB);
  REQUIRE(f.sim.graph_destroy(g) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(f.pool.destroy_graph_share_group(g1) == cudaSuccess);
  REQUIRE(f.pool.destroy_graph_share_group(g3) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == kMiB);
  f.pool.deallocate(out, f.s);
  CHECK(f.used() == 0);
  for (std::uint64_t id : {o1, o2, o3}) CHECK(other.destroy_graph_share_group(id) == cudaSuccess);
}

TEST_CASE("share groups scenario: a pool destroyed with groups alive", "[scenario][share_groups]") {
  // docs/graphs.md says "Destroy graphs before their pool" and nothing of
  // groups: here every member graph is released first, the groups (one with
  // a block, one empty, one named for a stream) left alive. ~Pool "releases
  // all memory" (pool.hpp).
  SimDriver sim(small_sim(std::size_t{1} << 30));
  cudaStream_t s = sim.create_stream();
  {
    Pool pool(options_on(sim));
    std::uint64_t g = 0, empty = 0, named = 0;
    REQUIRE(pool.create_graph_share_group(&g) == cudaSuccess);
    REQUIRE(pool.create_graph_share_group(&empty) == cudaSuccess);
    REQUIRE(pool.create_graph_share_group(&named) == cudaSuccess);
    REQUIRE(pool.capture_into_share_group(s, g) == cudaSuccess);
    REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* t = pool.allocate(6 * kMiB, s);
    pool.deallocate(t, s);
    cudaGraph_t graph = nullptr;
    REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
    REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
    CHECK(pool.graph_memory_stats().held_bytes == 6 * kMiB);  // the group holds it
    REQUIRE(pool.capture_into_share_group(s, named) == cudaSuccess);
  }
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().reservations == 0);
}

namespace {

struct OutputsFirst {
  std::uint64_t held = 0;
  int on_scratch = 0;
  int clobbered = 0;
};

// 16 members of one group captured on one stream, each allocating a 64 KiB
// output and then 8 MiB of scratch (freed in the capture), launched three
// times each in random order; what the group held, how many later outputs lie
// on an earlier member's scratch, how many times an output was found
// overwritten after another member's launch.
OutputsFirst outputs_first() {
  constexpr int kGraphs = 16;
  constexpr std::size_t kScratch = 8 * kMiB, kOut = 64 * 1024;
  Fixture f;
  const std::uint64_t group = f.new_group();
  std::atomic<unsigned> bad{0};
  std::vector<Step> steps(kGraphs);
  for (int i = 0; i < kGraphs; ++i) {
    Step& st = steps[static_cast<std::size_t>(i)];
    REQUIRE(f.pool.capture_into_share_group(f.s, group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    std::atomic<unsigned>* k = st.launches.get();
    f.sim.launch(f.s, [k] { k->fetch_add(1); });
    st.out = f.pool.allocate(kOut, f.s);  // the output first
    st.scratch = f.pool.allocate(kScratch, f.s);
    void* t = st.scratch;
    void* o = st.out;
    const unsigned base = static_cast<unsigned>(i) * 2u + 1u;
    f.sim.launch(f.s, [t, k, base] { fill_bytes(t, kScratch, tag_of(base, k->load())); });
    f.sim.launch(f.s, [t, o, k, base, &bad] {
      if (!all_bytes(t, kScratch, tag_of(base, k->load()))) bad.fetch_add(1);
      fill_bytes(o, kOut, tag_of(base + 1, k->load()));
    });
    f.pool.deallocate(st.scratch, f.s);
    REQUIRE(f.sim.end_capture(f.s, &st.graph) == cudaSuccess);
    REQUIRE(f.sim.graph_instantiate(&st.exec, st.graph) == cudaSuccess);
  }
  int on_scratch = 0;
  for (int i = 1; i < kGraphs; ++i)
    for (int j = 0; j < i; ++j) {
      const auto o = reinterpret_cast<std::uintptr_t>(steps[static_cast<std::size_t>(i)].out);
      const auto t = reinterpret_cast<std::uintptr_t>(steps[static_cast<std::size_t>(j)].scratch);
      if (o < t + kScratch && t < o + kOut) ++on_scratch;
    }
  const std::uint64_t held = f.held();
  std::mt19937 rng(7u);
  std::vector<int> order;
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < kGraphs; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  int clobbered = 0;
  for (int i : order) {
    REQUIRE(f.sim.graph_launch(steps[static_cast<std::size_t>(i)].exec, f.launch) == cudaSuccess);
    REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
    const Step& st = steps[static_cast<std::size_t>(i)];
    CHECK(all_bytes(st.out, kOut, tag_of(static_cast<unsigned>(i) * 2u + 2u, st.launches->load())));
    for (int j = 0; j < kGraphs; ++j) {
      const Step& other = steps[static_cast<std::size_t>(j)];
      if (j == i || other.launches->load() == 0) continue;
      if (!all_bytes(other.out, kOut, tag_of(static_cast<unsigned>(j) * 2u + 2u, other.launches->load()))) ++clobbered;
    }
  }
  CHECK(bad.load() == 0);
  CHECK(held <= kGraphs * (kScratch + kOut));  // never more than without a group
  for (Step& st : steps) {
    REQUIRE(f.sim.graph_exec_destroy(st.exec) == cudaSuccess);
    REQUIRE(f.sim.graph_destroy(st.graph) == cudaSuccess);
  }
  REQUIRE(f.pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == kGraphs * kOut);
  for (Step& st : steps) f.pool.deallocate(st.out, f.s2);
  CHECK(f.used() == 0);
  return OutputsFirst{held, on_scratch, clobbered};
}

}  // namespace

TEST_CASE("share groups scenario: outputs allocated before the scratch, and a later member's output on an earlier "
          "member's scratch (reported, not asserted)",
          "[scenario][share_groups]") {
  // docs/graphs.md says a member's outputs "are never handed to another member
  // while they are the caller's", and warns that a block another member reuses
  // "may still be a member's scratch" (read what a graph wrote to a block it
  // freed before launching another member). It does not say whether a later
  // member's *output* may be placed on an earlier member's scratch, which that
  // member's next launch then overwrites, nor how small outputs allocated
  // before the scratch are placed ("smallest fit first" lets them into a
  // group block). What this tree does is reported here, and only the
  // documented part asserted: each output holds its graph's bytes right after
  // that graph's launch.
  const OutputsFirst r = outputs_first();
  WARN("outputs first: held " << r.held << " bytes (one scratch plus the outputs: " << 8 * kMiB + 16 * 64 * 1024
                              << "; the sum: " << 16 * (8 * kMiB + 64 * 1024) << "); later outputs on an earlier "
                              << "member's scratch: " << r.on_scratch << "; outputs found overwritten after another "
                              << "member's launch: " << r.clobbered);
}

// A known limit ([!shouldfail]): with each member's small output allocated
// before its scratch, every later output takes the group's whole 8 MiB block
// ("smallest fit first", blocks shared whole), the next scratch gets new
// memory: the 16 members hold about the sum (134 MiB), not one scratch.
// docs/graphs.md, "What is shared", says so and to allocate scratch first.
// The same bound as the GPU twin's: 1.05 x the scratch plus the outputs.
TEST_CASE("share groups scenario: outputs allocated before the scratch still hold about one scratch",
          "[scenario][share_groups][!shouldfail]") {
  const OutputsFirst r = outputs_first();
  CHECK(r.held <= 8 * kMiB * 105 / 100 + 16 * 64 * 1024);
}

TEST_CASE("share groups scenario: an unjoined forked member capture fails; its outputs are the caller's",
          "[scenario][share_groups]") {
  // docs/graphs.md, "Several streams in one capture": "A capture that fails
  // (a forked stream not joined back ...) has its graph destroyed by the
  // runtime at cudaStreamEndCapture, so its memory comes back as a released
  // graph's does, whichever stream allocated it: what was freed at once, the
  // blocks the caller holds once freed" — for a member, what its capture
  // freed stays the group's until the group is destroyed.
  Fixture f;
  const std::uint64_t g = f.new_group();
  EventHandle fork = nullptr;
  REQUIRE(f.sim.event_create(&fork) == cudaSuccess);
  REQUIRE(f.pool.capture_into_share_group(f.s2, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  REQUIRE(f.sim.event_record(fork, f.s) == cudaSuccess);
  REQUIRE(f.sim.stream_wait_event(f.s2, fork) == cudaSuccess);
  void* t = f.pool.allocate(4 * kMiB, f.s2);  // the first allocation: the named side stream
  f.pool.deallocate(t, f.s2);
  void* out_side = f.pool.allocate(6 * kMiB, f.s2);
  void* out_origin = f.pool.allocate(2 * kMiB, f.s);
  f.sim.launch(f.s2, [] {});  // the side's last work, not joined back
  cudaGraph_t graph = nullptr;
  CHECK(f.sim.end_capture(f.s, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(f.held() == 4 * kMiB);  // the group's block
  CHECK(f.pool.block_size(out_side) == 6 * kMiB);
  CHECK(f.pool.block_size(out_origin) == 2 * kMiB);
  // The outputs are the caller's: refused under a capture, accepted once outside.
  REQUIRE(f.sim.begin_capture(f.s3, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out_side, f.s3) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t other = nullptr;
  REQUIRE(f.sim.end_capture(f.s3, &other) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(other) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out_side, f.s3) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out_origin, f.launch) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out_origin, f.launch) == cudaErrorInvalidValue);
  // A later member reuses the failed member's freed block.
  REQUIRE(f.pool.capture_into_share_group(f.s3, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s3, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = f.pool.allocate(4 * kMiB, f.s3);
  CHECK(p == t);
  f.pool.deallocate(p, f.s3);
  REQUIRE(f.sim.end_capture(f.s3, &other) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(other) == cudaSuccess);
  REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == 0);
  f.sim.event_destroy(fork);
  f.pool.check_invariants();
}

TEST_CASE("share groups scenario: two member captures open at once on two streams", "[scenario][share_groups]") {
  // "What is shared": a block freed during a member's capture becomes the
  // group's, and "a later allocation of any other member's capture reuses
  // it" — here the other capture is still open. Launched one at a time
  // afterwards (the promise), each graph's bytes are its own in its launch.
  Fixture f;
  const std::uint64_t g = f.new_group();
  std::atomic<unsigned> bad{0};
  REQUIRE(f.pool.capture_into_share_group(f.s, g) == cudaSuccess);
  REQUIRE(f.pool.capture_into_share_group(f.s2, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s2, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  void* a = f.pool.allocate(4 * kMiB, f.s);
  f.sim.launch(f.s, [a] { fill_bytes(a, 4 * kMiB, 0xA1); });
  f.sim.launch(f.s, [a, &bad] {
    if (!all_bytes(a, 4 * kMiB, 0xA1)) bad.fetch_add(1);
  });
  f.pool.deallocate(a, f.s);
  void* b = f.pool.allocate(4 * kMiB, f.s2);
  CHECK(b == a);  // the group's block, from the other open member
  void* bout = f.pool.allocate(kMiB, f.s2);
  f.sim.launch(f.s2, [b, bout, &bad] {
    fill_bytes(b, 4 * kMiB, 0xB2);
    if (!all_bytes(b, 4 * kMiB, 0xB2)) bad.fetch_add(1);
    fill_bytes(bout, kMiB, 0xB3);
  });
  f.pool.deallocate(b, f.s2);
  cudaGraph_t ga = nullptr, gb = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &ga) == cudaSuccess);
  REQUIRE(f.sim.end_capture(f.s2, &gb) == cudaSuccess);
  CHECK(f.held() == 5 * kMiB);
  cudaGraphExec_t ea = nullptr, eb = nullptr;
  REQUIRE(f.sim.graph_instantiate(&ea, ga) == cudaSuccess);
  REQUIRE(f.sim.graph_instantiate(&eb, gb) == cudaSuccess);
  for (int i = 0; i < 5; ++i) {
    REQUIRE(f.sim.graph_launch(i % 2 ? ea : eb, f.launch) == cudaSuccess);
  }
  REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
  CHECK(bad.load() == 0);
  CHECK(all_bytes(bout, kMiB, 0xB3));
  REQUIRE(f.sim.graph_exec_destroy(ea) == cudaSuccess);
  REQUIRE(f.sim.graph_exec_destroy(eb) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(ga) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(gb) == cudaSuccess);
  CHECK(f.held() == 4 * kMiB);  // the group's, until it is destroyed
  REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == kMiB);
  f.pool.deallocate(bout, f.s3);
  CHECK(f.used() == 0);
}

TEST_CASE("share groups scenario: group calls from another thread leave a global capture valid",
          "[scenario][share_groups]") {
  // A global-mode capture invalidates on "potentially unsafe" calls from any
  // thread; sova's driver calls run relaxed ("Semantics"). The group calls
  // made while another thread captures must leave that capture valid.
  Fixture f;
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = f.pool.allocate(2 * kMiB, f.s);
  std::thread other([&] {
    std::uint64_t g = 0;
    CHECK(f.pool.create_graph_share_group(&g) == cudaSuccess);
    CHECK(f.pool.capture_into_share_group(f.s2, g) == cudaSuccess);
    CHECK(f.pool.capture_into_share_group(f.s2, 0) == cudaSuccess);
    CHECK(f.pool.destroy_graph_share_group(g) == cudaSuccess);
    CHECK(f.pool.destroy_graph_share_group(g) == cudaErrorInvalidValue);
  });
  other.join();
  CHECK(capture_info(f.sim, f.s).status == cudaStreamCaptureStatusActive);
  f.pool.deallocate(t, f.s);
  cudaGraph_t graph = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &graph) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(graph) == cudaSuccess);
  CHECK(f.held() == 0);
}

TEST_CASE("share groups scenario: trims leave what a group holds; its block serves a later member",
          "[scenario][share_groups]") {
  // "What graphs hold, and trim": trim_graph_memory "returns the memory of
  // released graphs to the pool ... Memory graphs still hold stays"; a group
  // holds its blocks "until it is destroyed and every member is released".
  Fixture f;
  const std::uint64_t g = f.new_group();
  REQUIRE(f.pool.capture_into_share_group(f.s, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = f.pool.allocate(8 * kMiB, f.s);
  f.pool.deallocate(t, f.s);
  cudaGraph_t graph = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &graph) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(graph) == cudaSuccess);
  CHECK(f.held() == 8 * kMiB);
  f.pool.trim_graph_memory();
  f.pool.trim_to(0);
  CHECK(f.held() == 8 * kMiB);
  CHECK(reserved_of(f.pool) >= 8 * kMiB);
  // Eager work gets other memory.
  void* e = f.pool.allocate(8 * kMiB, f.s2);
  CHECK((reinterpret_cast<std::uintptr_t>(e) + 8 * kMiB <= reinterpret_cast<std::uintptr_t>(t) ||
         reinterpret_cast<std::uintptr_t>(t) + 8 * kMiB <= reinterpret_cast<std::uintptr_t>(e)));
  f.pool.deallocate(e, f.s2);
  // A later member gets the group's block, mapped: its kernel writes it.
  REQUIRE(f.pool.capture_into_share_group(f.s3, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s3, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* p = f.pool.allocate(8 * kMiB, f.s3);
  CHECK(p == t);
  std::atomic<int> ran{0};
  f.sim.launch_touching(f.s3, p, 8 * kMiB, true, [p, &ran] {
    fill_bytes(p, 8 * kMiB, 0x42);
    if (all_bytes(p, 8 * kMiB, 0x42)) ran.fetch_add(1);
  });
  f.pool.deallocate(p, f.s3);
  REQUIRE(f.sim.end_capture(f.s3, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(f.sim.graph_instantiate(&exec, graph) == cudaSuccess);
  f.pool.trim_to(0);
  REQUIRE(f.sim.graph_launch(exec, f.launch) == cudaSuccess);
  REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
  CHECK(ran.load() == 1);
  CHECK(f.sim.faults() == 0);
  REQUIRE(f.sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  f.pool.trim_graph_memory();
  f.pool.trim_to(0);
  CHECK(reserved_of(f.pool) == 0);
}

TEST_CASE("share groups scenario: a failed first allocation of a member capture changes nothing",
          "[scenario][share_groups]") {
  // "Semantics": "A failed allocation during capture (out of memory,
  // cudaErrorMemoryAllocation) changes nothing and leaves the capture valid."
  // So the stream's name still stands for the capture's next (first
  // successful) allocation, which then joins and gets the group's block.
  JoinProbe j;
  Fixture& f = j.f;
  REQUIRE(f.pool.capture_into_share_group(f.s, j.group) == cudaSuccess);
  const std::uint64_t held_before = f.held();
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* huge = reinterpret_cast<void*>(0x1);
  CHECK(f.pool.try_allocate(&huge, std::size_t{4} << 30, f.s) == cudaErrorMemoryAllocation);
  CHECK(huge == nullptr);
  CHECK(capture_info(f.sim, f.s).status == cudaStreamCaptureStatusActive);
  CHECK(f.held() == held_before);
  void* p = f.pool.allocate(4 * kMiB, f.s);
  CHECK(p == j.shared);
  f.pool.deallocate(p, f.s);
  j.end(f.s);
  CHECK(f.held() == held_before);
}

namespace {

// A member's output, its graph released: freed under another capture
// (refused, as for any block from before the capture), then by the caller
// outside capture (once). `group_alive`: the group not yet destroyed when
// the member is released.
void released_member_output(bool group_alive, bool member, bool on_own_scratch = false) {
  // docs/graphs.md, "When memory comes back": "A block the graph allocated and
  // nobody freed stays the caller's ... until the caller frees it (on any
  // stream; once; under a capture that free is then refused with
  // cudaErrorStreamCaptureUnsupported, as for any block allocated before the
  // capture)"; "What is shared": "Outputs stay the caller's, as for any graph."
  Fixture f;
  const std::uint64_t g = f.new_group();
  if (member) REQUIRE(f.pool.capture_into_share_group(f.s, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = f.pool.allocate(4 * kMiB, f.s);
  void* out = nullptr;
  if (on_own_scratch) {
    // Freed first: the output is then allocated on the scratch's block (a
    // later allocation of the capture on the stream of the free).
    f.pool.deallocate(t, f.s);
    out = f.pool.allocate(2 * kMiB, f.s);
    CHECK(out == t);
  } else {
    out = f.pool.allocate(2 * kMiB, f.s);
    f.pool.deallocate(t, f.s);
  }
  cudaGraph_t graph = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &graph) == cudaSuccess);
  if (!group_alive) REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(graph) == cudaSuccess);
  if (!on_own_scratch) CHECK(f.held() == (member && group_alive ? 4 * kMiB : 0));
  CHECK(f.pool.block_size(out) == 2 * kMiB);
  REQUIRE(f.sim.begin_capture(f.s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s2) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t other = nullptr;
  REQUIRE(f.sim.end_capture(f.s2, &other) == cudaSuccess);
  REQUIRE(f.sim.graph_destroy(other) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s3) == cudaSuccess);
  CHECK(f.pool.try_deallocate(out, f.s3) == cudaErrorInvalidValue);
  if (group_alive) REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == 0);
  f.pool.check_invariants();
}

}  // namespace

TEST_CASE("share groups scenario: a released graph's output is the caller's", "[scenario][share_groups]") {
  SECTION("no group") { released_member_output(true, false); }
  SECTION("no group, the output on the graph's freed scratch") { released_member_output(true, false, true); }
  SECTION("a member, the group destroyed before the release") { released_member_output(false, true); }
  SECTION("a member, the group alive") { released_member_output(true, true); }
  SECTION("a member, the output on its freed scratch, the group destroyed before the release") {
    released_member_output(false, true, true);
  }
}

// A member's output allocated on the block of its own scratch freed earlier
// in the capture (a block freed in a member's capture is the group's) is the
// caller's once the member is released while the group lives: a free under
// another capture is refused (cudaErrorStreamCaptureUnsupported) and the
// caller's own free after it succeeds, once (before the fix, the capture's
// free was accepted and the caller's refused). docs/graphs.md, "When memory comes back"
// ("stays the caller's ... under a capture that free is then refused with
// cudaErrorStreamCaptureUnsupported"), "What is shared" ("Outputs stay the
// caller's, as for any graph"). The invalidated member's case above is the
// same: its output lies on its freed scratch too.
TEST_CASE("share groups scenario: a released member's output on its freed scratch is the caller's while the group "
          "lives",
          "[scenario][share_groups]") {
  released_member_output(true, true, true);
}

TEST_CASE("share groups scenario: an output on its own freed scratch is never handed to another member",
          "[scenario][share_groups]") {
  // "What is shared": a block freed during a member's capture becomes the
  // group's; "A member's outputs (allocated in its capture and not freed
  // there) are never handed to another member while they are the caller's."
  // Here the output is allocated on the block the capture freed just before,
  // exactly its size; the later members must get other memory, while the
  // first member lives and after it is released, and the output keep its bytes.
  Fixture f;
  bool release_first = false;
  SECTION("the first member alive") {}
  SECTION("the first member released") { release_first = true; }
  CAPTURE(release_first);
  const std::uint64_t g = f.new_group();
  REQUIRE(f.pool.capture_into_share_group(f.s, g) == cudaSuccess);
  REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* t = f.pool.allocate(4 * kMiB, f.s);
  f.pool.deallocate(t, f.s);
  void* out = f.pool.allocate(4 * kMiB, f.s);
  CHECK(out == t);
  f.sim.launch(f.s, [out] { fill_bytes(out, 4 * kMiB, 0x3C); });
  cudaGraph_t ga = nullptr;
  REQUIRE(f.sim.end_capture(f.s, &ga) == cudaSuccess);
  cudaGraphExec_t ea = nullptr;
  REQUIRE(f.sim.graph_instantiate(&ea, ga) == cudaSuccess);
  REQUIRE(f.sim.graph_launch(ea, f.launch) == cudaSuccess);
  REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
  if (release_first) {
    REQUIRE(f.sim.graph_exec_destroy(ea) == cudaSuccess);
    REQUIRE(f.sim.graph_destroy(ga) == cudaSuccess);
    ea = nullptr;
    ga = nullptr;
  }
  std::vector<cudaGraph_t> later;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(f.pool.capture_into_share_group(f.s2, g) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(f.s2, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* p = f.pool.allocate(4 * kMiB, f.s2);
    CHECK(p != out);
    f.sim.launch(f.s2, [p] { fill_bytes(p, 4 * kMiB, 0x99); });
    f.pool.deallocate(p, f.s2);
    cudaGraph_t gb = nullptr;
    REQUIRE(f.sim.end_capture(f.s2, &gb) == cudaSuccess);
    cudaGraphExec_t eb = nullptr;
    REQUIRE(f.sim.graph_instantiate(&eb, gb) == cudaSuccess);
    REQUIRE(f.sim.graph_launch(eb, f.launch) == cudaSuccess);
    REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
    REQUIRE(f.sim.graph_exec_destroy(eb) == cudaSuccess);
    later.push_back(gb);
  }
  void* e = f.pool.allocate(4 * kMiB, f.s3);  // nor eager work
  CHECK(e != out);
  f.pool.deallocate(e, f.s3);
  CHECK(all_bytes(out, 4 * kMiB, 0x3C));
  for (cudaGraph_t gb : later) REQUIRE(f.sim.graph_destroy(gb) == cudaSuccess);
  if (ea != nullptr) REQUIRE(f.sim.graph_exec_destroy(ea) == cudaSuccess);
  if (ga != nullptr) REQUIRE(f.sim.graph_destroy(ga) == cudaSuccess);
  REQUIRE(f.pool.destroy_graph_share_group(g) == cudaSuccess);
  CHECK(f.held() == 0);
  CHECK(f.used() == 4 * kMiB);
  CHECK(all_bytes(out, 4 * kMiB, 0x3C));
  CHECK(f.pool.try_deallocate(out, f.s3) == cudaSuccess);
  CHECK(f.used() == 0);
  f.pool.check_invariants();
}

namespace {

struct BatchSizes {
  std::uint64_t held = 0, outputs = 0, largest = 0;
  int outputs_on_scratch = 0;
  int clobbered = 0;
  unsigned bad = 0;
};

// "One per batch size in an inference engine" (docs/graphs.md): 8 members
// captured largest batch first, scratch 8, 7, ..., 1 MiB (+ 512 B), an output
// of scratch/4 allocated while the scratch is live, then the scratch freed
// (the docs' example order), launched in random order, one at a time.
BatchSizes batch_sizes() {
  constexpr int kMembers = 8;
  Fixture f;
  const std::uint64_t group = f.new_group();
  std::atomic<unsigned> bad{0};
  std::vector<Step> steps(kMembers);
  std::vector<std::size_t> scratch(kMembers), out(kMembers);
  BatchSizes r;
  for (int i = 0; i < kMembers; ++i) {
    scratch[static_cast<std::size_t>(i)] = static_cast<std::size_t>(kMembers - i) * kMiB + 512;
    out[static_cast<std::size_t>(i)] = scratch[static_cast<std::size_t>(i)] / 4;
    r.outputs += out[static_cast<std::size_t>(i)];
  }
  r.largest = scratch[0];
  for (int i = 0; i < kMembers; ++i) {
    Step& st = steps[static_cast<std::size_t>(i)];
    const std::size_t ns = scratch[static_cast<std::size_t>(i)], no = out[static_cast<std::size_t>(i)];
    REQUIRE(f.pool.capture_into_share_group(f.s, group) == cudaSuccess);
    REQUIRE(f.sim.begin_capture(f.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    std::atomic<unsigned>* k = st.launches.get();
    f.sim.launch(f.s, [k] { k->fetch_add(1); });
    st.scratch = f.pool.allocate(ns, f.s);
    st.out = f.pool.allocate(no, f.s);
    void* t = st.scratch;
    void* o = st.out;
    const unsigned base = static_cast<unsigned>(i) * 2u + 1u;
    f.sim.launch(f.s, [t, ns, k, base] { fill_bytes(t, ns, tag_of(base, k->load())); });
    f.sim.launch(f.s, [t, ns, o, no, k, base, &bad] {
      if (!all_bytes(t, ns, tag_of(base, k->load()))) bad.fetch_add(1);
      fill_bytes(o, no, tag_of(base + 1, k->load()));
    });
    f.pool.deallocate(st.scratch, f.s);
    REQUIRE(f.sim.end_capture(f.s, &st.graph) == cudaSuccess);
    REQUIRE(f.sim.graph_instantiate(&st.exec, st.graph) == cudaSuccess);
  }
  for (int i = 0; i < kMembers; ++i)
    for (int j = 0; j < kMembers; ++j) {
      if (i == j) continue;
      const auto o = reinterpret_cast<std::uintptr_t>(steps[static_cast<std::size_t>(i)].out);
      const auto t = reinterpret_cast<std::uintptr_t>(steps[static_cast<std::size_t>(j)].scratch);
      if (o < t + scratch[static_cast<std::size_t>(j)] && t < o + out[static_cast<std::size_t>(i)]) ++r.outputs_on_scratch;
    }
  r.held = f.held();
  std::mt19937 rng(99u);
  std::vector<int> order;
  for (int round = 0; round < 3; ++round)
    for (int i = 0; i < kMembers; ++i) order.push_back(i);
  std::shuffle(order.begin(), order.end(), rng);
  for (int i : order) {
    REQUIRE(f.sim.graph_launch(steps[static_cast<std::size_t>(i)].exec, f.launch) == cudaSuccess);
    REQUIRE(f.sim.stream_synchronize(f.launch) == cudaSuccess);
    for (int j = 0; j < kMembers; ++j) {
      const Step& st = steps[static_cast<std::size_t>(j)];
      if (st.launches->load() == 0) continue;
      if (!all_bytes(st.out, out[static_cast<std::size_t>(j)], tag_of(static_cast<unsigned>(j) * 2u + 2u, st.launches->load())))
        ++r.clobbered;
    }
  }
  r.bad = bad.load();
  for (Step& st : steps) {
    REQUIRE(f.sim.graph_exec_destroy(st.exec) == cudaSuccess);
    REQUIRE(f.sim.graph_destroy(st.graph) == cudaSuccess);
  }
  REQUIRE(f.pool.destroy_graph_share_group(group) == cudaSuccess);
  CHECK(f.held() == 0);
  for (Step& st : steps) f.pool.deallocate(st.out, f.s2);
  CHECK(f.used() == 0);
  return r;
}

}  // namespace

TEST_CASE("share groups scenario: one graph per batch size, largest first: about the largest scratch held",
          "[scenario][share_groups]") {
  // "they hold about what the largest of them needs, not their sum".
  const BatchSizes r = batch_sizes();
  INFO("held " << r.held << ", largest scratch " << r.largest << ", outputs " << r.outputs
               << ", outputs on another member's scratch " << r.outputs_on_scratch << ", outputs overwritten "
               << r.clobbered);
  CHECK(r.bad == 0);
  CHECK(r.held <= r.largest * 105 / 100 + r.outputs + 8 * 64 * 1024);
  // Where the outputs landed is not said (see "outputs allocated before the
  // scratch" above); on this tree none lies on another member's scratch here.
  CHECK(r.outputs_on_scratch >= 0);
}

TEST_CASE("share groups scenario: naming cudaStreamPerThread", "[scenario][share_groups]") {
  // Only the legacy stream is refused ("The legacy stream cannot capture");
  // cudaStreamPerThread names the calling thread's own stream (sim.hpp), which
  // can capture. A capture on it in the same thread joins. Whether a name
  // given through the handle reaches another thread's per-thread stream (the
  // same handle, another stream) is not said: reported, not asserted.
  JoinProbe j;
  Fixture& f = j.f;
  REQUIRE(f.pool.capture_into_share_group(cudaStreamPerThread, j.group) == cudaSuccess);
  bool other_joined = false;
  std::thread other([&] {
    REQUIRE(f.sim.begin_capture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    void* p = f.pool.allocate(4 * kMiB, cudaStreamPerThread);
    other_joined = p == j.shared;
    f.pool.deallocate(p, cudaStreamPerThread);
    cudaGraph_t g = nullptr;
    REQUIRE(f.sim.end_capture(cudaStreamPerThread, &g) == cudaSuccess);
    REQUIRE(f.sim.graph_destroy(g) == cudaSuccess);
  });
  other.join();
  WARN("a name given for cudaStreamPerThread on one thread reached another thread's per-thread stream: "
       << other_joined);
  if (other_joined) REQUIRE(f.pool.capture_into_share_group(cudaStreamPerThread, j.group) == cudaSuccess);
  CHECK(j.joins(cudaStreamPerThread));
}
