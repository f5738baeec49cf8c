// The pool-operation interpreter (interpreter.hpp). A World holds the
// simulation, the pools and what every thread may see (the live blocks'
// ranges, blocks handed between threads); an Actor is one host thread's
// program: its streams, its blocks, and the operations it reads from its
// bytes. docs/fuzzing.md lists the operations and the checks.
#include "fuzz/interpreter.hpp"

#include "fuzz/byte_reader.hpp"
#include "fuzz/garbage_policy.hpp"
#include "fuzz/mark_model.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

namespace sova::fuzz {
namespace {

constexpr int kMaxPools = 3;
constexpr int kMaxStreams = 3;          // created streams per actor
constexpr std::size_t kTagSpan = 4096;  // tag bytes written at a block's head and tail
constexpr std::size_t kMiB = std::size_t{1} << 20;
/// A backup reservation of this or more is beyond any host (64 TiB).
constexpr std::size_t kHugeReserve = std::size_t{1} << 46;

#define FUZZ_CHECK(cond, what) \
  do { \
    if (!(cond)) throw Failure(std::string(what) + " (" #cond ", line " + std::to_string(__LINE__) + ")"); \
  } while (0)

struct AtomicCounts {
  std::atomic<long> operations{0}, allocations{0}, failed_allocations{0}, frees{0}, refused_frees{0}, pools_made{0},
      pools_refused{0}, streams_destroyed{0}, handoffs{0};
  std::atomic<long> captures{0}, captures_ended{0}, captures_invalidated{0}, graph_allocations{0},
      graph_failed_allocations{0}, graph_frees{0}, capture_frees_refused{0}, graph_launches{0}, graphs_released{0},
      output_frees{0}, memory_back_checks{0};
  std::atomic<long> foreign_captures{0}, foreign_ended{0}, foreign_invalidated{0}, foreign_invalidated_unexplained{0};
  std::atomic<long> sleeps{0}, failed_sleeps{0}, cut_short_sleeps{0}, wakes{0}, failed_wakes{0}, frees_asleep{0},
      allocations_asleep{0}, trims_asleep{0}, blocks_restored{0}, blocks_zeroed{0}, budget_refusals{0},
      host_reserves{0}, host_releases{0};
  std::atomic<long> frees_during_wake{0}, reallocated_after_wake{0}, failed_growth_releases{0}, huge_reserves{0},
      stream_rounds{0};
};
AtomicCounts g_counts;
void bump(std::atomic<long>& c) { c.fetch_add(1, std::memory_order_relaxed); }

struct Block {
  int pool = 0;
  unsigned char* p = nullptr;
  std::size_t bytes = 0;
  unsigned char tag = 0;
  cudaStream_t last = nullptr;  ///< the stream of its last use (tag write)
  bool pending = false;         ///< work on `last` may still use it
};

/// A block passed to another thread: `ready` covers its last use.
struct Handoff {
  Block block;
  EventHandle ready = nullptr;
};

struct PoolSlot {
  std::unique_ptr<Pool> pool;
  int device = 0;
  bool check_streams = true;  ///< sees captures (docs/graphs.md, "Stream checks are required")
  bool discarded = false;     ///< the sleep that put it asleep dropped the contents
  bool zeroed = false;        ///< ... and asked wake to zero the blocks (SleepMode::discard_zeroed)
  std::size_t host_budget = 0;  ///< PoolOptions::sleep_host_budget (0: none)
  bool pin_ahead = false;       ///< PoolOptions::sleep_pin_ahead
  MarkModel marks;              ///< its high-water marks and pin-ahead's hold (one thread)
};

/// A block allocated under a capture (graph memory).
struct GraphBlock {
  int pool = 0;
  unsigned char* p = nullptr;
  std::size_t bytes = 0;
  unsigned char tag = 0;
  /// What the pool counts in used bytes for it: its size; 0 once a later
  /// allocation of the capture reused it.
  std::size_t counted = 0;
  bool freed_in_graph = false;
  bool caller_freed = false;  ///< an output the caller freed (outside capture)
  bool tag_known = false;     ///< an output a launch wrote (and no discarding sleep since)
};

/// A capture of pool operations, then its graph, executables and launches.
struct GraphRecord {
  int id = 0;
  cudaStream_t origin = nullptr;  ///< the capturing stream, made for it (non-blocking)
  int device = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  bool capturing = true;
  /// Invalidated by a call documented to synchronize the device (a trim, the
  /// out-of-memory path of a pool the capture did not allocate from).
  bool exposed = false;
  bool op_may_sync = false;  ///< the current operation made such a call
  std::size_t syncs_at_begin = 0;
  std::vector<GraphBlock> blocks;
  std::vector<int> pools_used;  ///< pools that served one of its allocations: they know the capture
  /// Pools asked for an allocation under it, served or not: a failed one
  /// registers the capture with the pool too (GraphMemoryStats::graphs).
  std::vector<int> pools_tried;
  cudaGraph_t graph = nullptr;
  std::vector<cudaGraphExec_t> execs;
  cudaStream_t last_use = nullptr;  ///< the stream of the last launch (or use of its outputs)
  bool has_last_use = false;
  bool released = false;  ///< graph and executables gone, launches done: its memory is back
  bool uses(int pool) const { return std::find(pools_used.begin(), pools_used.end(), pool) != pools_used.end(); }
  bool tried(int pool) const { return std::find(pools_tried.begin(), pools_tried.end(), pool) != pools_tried.end(); }
};

/// A capture of plain work beside the pools', never touching sova.
struct ForeignCapture {
  cudaStream_t stream = nullptr;
  int device = 0;
  bool open = false;
  bool exposed = false;  ///< invalidated, by a call that may synchronize the device
  bool op_may_sync = false;
  bool invalidated_seen = false;
  std::shared_ptr<std::atomic<int>> ran = std::make_shared<std::atomic<int>>(0);
  int nodes = 0;
};

/// Work on a stream writes or checks a block's tag; mismatches are counted.
struct Tags {
  std::atomic<long> mismatches{0};
  static void write(unsigned char* p, std::size_t bytes, unsigned char tag) {
    const std::size_t head = std::min(bytes, kTagSpan);
    std::memset(p, tag, head);
    std::memset(p + bytes - head, tag, head);
  }
  static bool holds(const unsigned char* p, std::size_t bytes, unsigned char tag) {
    const std::size_t head = std::min(bytes, kTagSpan);
    for (std::size_t i = 0; i < head; ++i) {
      if (p[i] != tag || p[bytes - head + i] != tag) return false;
    }
    return true;
  }
};

class World {
 public:
  World(ByteReader& in, bool threaded, const Options& options)
      : threaded(threaded), options(options), config(config_from(in)), sim(config), granularity(config.granularity) {
    const int pools = 1 + static_cast<int>(in.below(kMaxPools));
    for (int i = 0; i < pools; ++i) create_pool(i, in);
  }

  static SimConfig config_from(ByteReader& in) {
    SimConfig config;
    config.device_count = 2;
    config.total_memory = std::size_t{64} << 20;
    config.granularity = (in.byte() & 1) != 0 ? std::size_t{64} << 10 : std::size_t{2} << 20;
    config.abort_on_fault = false;  // a device fault is counted and checked (faults() == 0)
    return config;
  }

  /// Makes pool `slot` from options read from `in`; a refused option set
  /// must leave nothing behind.
  void create_pool(int slot, ByteReader& in) {
    PoolOptions o;
    o.driver = &sim;
    o.device = static_cast<int>(in.below(2));
    switch (in.below(6)) {
      case 0: o.policy = Policy::size_classes; break;
      case 1: o.policy = Policy::buddy; break;
      case 2: o.policy = Policy::best_fit; break;
      case 3:
        o.policy = Policy::custom;
        o.placement = std::make_shared<GarbagePolicy>(in.u32());
        break;
      default: o.policy = Policy::default_policy; break;
    }
    const std::size_t mode = in.below(8);
    o.remap = mode != 0;
    o.remap_effort = mode == 1 ? RemapEffort::thorough : RemapEffort::balanced;
    switch (in.below(8)) {
      case 0: o.max_size = SIZE_MAX; break;
      case 1: o.max_size = 3 * kMiB + in.below(4) * 512; break;
      case 2: o.max_size = 24 * kMiB; break;
      case 3: o.max_size = (std::size_t{1} << 63) + (std::size_t{2} << 20); break;
      default: o.max_size = 0; break;
    }
    switch (in.below(8)) {
      case 0: o.va_reserve = 16 * kMiB; break;
      case 1: o.va_reserve = 1 + in.below(256) * 4096; break;
      default: o.va_reserve = 0; break;
    }
    switch (in.below(4)) {
      case 0: o.max_chunk = 0; break;
      case 1: o.max_chunk = 3 * kMiB; break;
      default: break;  // the default 32 MiB
    }
    o.release_threshold = in.flag() ? 0 : (in.flag() ? UINT64_MAX : 4 * kMiB);
    o.check_streams = in.below(4) != 0;
    o.reuse_allow_opportunistic = in.below(4) != 0;
    o.reuse_allow_internal_dependencies = in.below(4) != 0;
    // Sleep's host memory: pinned ahead by a background thread, within a budget.
    o.sleep_pin_ahead = in.below(4) == 0;
    o.sleep_host_budget = in.below(4) == 0 ? (1 + in.below(16)) * kMiB : 0;
    const std::size_t reservations = sim.counters().reservations;
    try {
      pools[slot].pool = std::make_unique<Pool>(o);
      pools[slot].device = o.device;
      pools[slot].check_streams = o.check_streams;
      pools[slot].discarded = false;
      pools[slot].zeroed = false;
      pools[slot].host_budget = o.sleep_host_budget;
      pools[slot].pin_ahead = o.sleep_pin_ahead;
      pools[slot].marks = MarkModel(o.sleep_pin_ahead, o.sleep_host_budget, config.total_memory);
      bump(g_counts.pools_made);
    } catch (const Error&) {
      bump(g_counts.pools_refused);
      FUZZ_CHECK(sim.counters().reservations == reservations, "a refused pool left its VA reserved");
    }
  }

  const bool threaded;
  const Options options;
  const SimConfig config;
  SimDriver sim;
  const std::size_t granularity;
  PoolSlot pools[kMaxPools];
  Tags tags;

  /// Operations hold it shared, the invariant check exclusively.
  std::shared_mutex checking;

  // Guarded by `mu`: what other threads may see.
  std::mutex mu;
  std::map<std::uintptr_t, std::size_t> live;  ///< every live block's range, all pools
  std::deque<Handoff> handoffs;
  struct Held {
    std::uintptr_t start;
    std::size_t bytes;
    int graph;
  };
  std::vector<Held> held;  ///< what graphs hold (their blocks, freed in them or not) until released

  /// Records a new live block, checking it overlaps none, nor memory a graph
  /// holds (but `graph`'s own: a free in a capture is reusable by it).
  void add_live(const unsigned char* p, std::size_t bytes, int graph = -1) {
    std::lock_guard lock(mu);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (const Held& h : held) {
      FUZZ_CHECK(h.graph == graph || h.start + h.bytes <= a || a + bytes <= h.start,
                 "a new block overlaps memory a graph holds");
    }
    auto next = live.lower_bound(a);
    FUZZ_CHECK(next == live.end() || next->first >= a + bytes, "a new block overlaps a live one (after it)");
    if (next != live.begin()) {
      const auto prev = std::prev(next);
      FUZZ_CHECK(prev->first + prev->second <= a, "a new block overlaps a live one (before it)");
    }
    live.emplace(a, bytes);
  }
  void drop_live(const unsigned char* p) {
    std::lock_guard lock(mu);
    live.erase(reinterpret_cast<std::uintptr_t>(p));
  }
  bool is_live_start(const unsigned char* p) {
    std::lock_guard lock(mu);
    return live.count(reinterpret_cast<std::uintptr_t>(p)) != 0;
  }
};

class Actor {
 public:
  Actor(World& world, ByteReader in, int id)
      : w_(world), in_(in), id_(id), trace_(std::getenv("SOVA_FUZZ_TRACE") != nullptr) {}

  void run(std::size_t max_ops) {
    std::size_t op = 0;
    try {
      for (; op < max_ops && !in_.done(); ++op) {
        {
          std::shared_lock quiet(w_.checking);
          step();
        }
        if (trace_) {
          std::fprintf(stderr, "sova fuzz: actor %d op %zu: %s (device synchronizes so far: %zu)\n", id_, op,
                       (op_name_ + op_detail_).c_str(), w_.sim.counters().device_synchronizes);
        }
        if (!w_.threaded || op % 16 == 0) {
          // With threads, the check waits for the others' operations in flight:
          // check_invariants does not lock stream states created during its walk
          // (test/core/test_check_invariants_new_streams.cpp, [.lead-todo]).
          std::unique_lock alone(w_.checking);
          check_pools();
          check_quiet();
          if (!w_.threaded) {
            check_captures();
            observe_marks();
          }
        }
      }
      std::shared_lock quiet(w_.checking);
      finish();
    } catch (const Failure& f) {
      throw Failure(std::string(f.what()) + " [operation " + std::to_string(op) + ": " + op_name_ + op_detail_ + "]");
    }
  }

 private:
  // ---- choices --------------------------------------------------------------
  Pool* pick_pool(int* index) {
    const int start = static_cast<int>(in_.below(kMaxPools));
    for (int k = 0; k < kMaxPools; ++k) {
      const int i = (start + k) % kMaxPools;
      if (w_.pools[i].pool) {
        *index = i;
        return w_.pools[i].pool.get();
      }
    }
    return nullptr;
  }
  /// A stream of `device`: one of this actor's, or (device 0) the legacy or
  /// the per-thread stream.
  cudaStream_t pick_stream(int device) {
    std::vector<cudaStream_t> choices;
    for (const auto& [s, d] : streams_)
      if (d == device) choices.push_back(s);
    if (device == 0) {
      choices.push_back(nullptr);
      choices.push_back(cudaStreamPerThread);
    }
    if (choices.empty()) return any_stream(device);
    return choices[in_.below(choices.size())];
  }
  /// Some stream of `device`: the legacy stream, or one of this actor's
  /// (made if it has none, beyond kMaxStreams if need be).
  cudaStream_t any_stream(int device) {
    if (device == 0) return nullptr;
    for (const auto& [s, d] : streams_)
      if (d == device) return s;
    streams_.emplace_back(w_.sim.create_stream(false, device), device);
    return streams_.back().first;
  }
  std::size_t pick_size() {
    const std::size_t g = w_.granularity;
    switch (in_.below(12)) {
      case 0: return 0;
      case 1: return 1 + in_.below(512);
      case 2: {  // near a granule edge
        const std::size_t k = 1 + in_.below(8);
        const std::size_t deltas[] = {0, 1, 511, 512, 513};
        const std::size_t d = deltas[in_.below(5)];
        return in_.flag() ? k * g + d : k * g - d;
      }
      case 3: return SIZE_MAX - in_.below(4096);
      case 4: return std::size_t{1} << in_.below(64);
      case 5: return (std::size_t{64} << 20) + in_.below(3) * 512 - 512;  // the device's size
      case 6: return 1 + in_.u32() % (8 * kMiB);
      case 7: return 1 + in_.u32() % (40 * kMiB);
      default: return 1 + in_.below(256) * 256;
    }
  }

  // ---- the operations ---------------------------------------------------------
  void step() {
    bump(g_counts.operations);
    op_name_ = "?";
    op_detail_.clear();
    switch (in_.below(20)) {
      case 0:
      case 1:
      case 2:
      case 3:
      case 4: allocate(); break;
      case 5:
      case 6:
      case 7: free_one(); break;
      case 8: bad_free(); break;
      case 9: streams(); break;
      case 10: trim(); break;
      case 11: attribute(); break;
      case 12: access(); break;
      case 13: inject(); break;
      case 14: synchronize(); break;
      case 15:
        op_name_ = "delay";
        w_.sim.delay(pick_stream(static_cast<int>(in_.below(2))), std::chrono::microseconds(in_.below(200)));
        break;
      case 16: handoff(); break;
      case 17: pool_lifecycle(); break;
      case 18: free_across_devices(); break;
      default: extended(); break;  // 19: the operations added since (captures, graphs, sleep)
    }
  }

  /// Device faults and tag mismatches, as soon as they are seen.
  void check_quiet() {
    FUZZ_CHECK(w_.sim.faults() == 0, "a device fault: " + w_.sim.first_fault());
    FUZZ_CHECK(w_.tags.mismatches.load() == 0, "a block's tag was overwritten while it was live");
  }

  /// Work on `s` writes (or checks) a block's tag; the simulation checks
  /// that the memory is mapped with that access when it runs.
  void write_tag(cudaStream_t s, unsigned char* p, std::size_t bytes, unsigned char tag) {
    w_.sim.launch_touching(s, p, bytes, true, [p, bytes, tag] { Tags::write(p, bytes, tag); });
  }
  void check_tag(cudaStream_t s, const unsigned char* p, std::size_t bytes, unsigned char tag) {
    Tags* tags = &w_.tags;
    const bool trace = trace_;
    const char* what = op_name_;
    w_.sim.launch_touching(s, p, bytes, false, [p, bytes, tag, tags, trace, what, s] {
      if (Tags::holds(p, bytes, tag)) return;
      tags->mismatches.fetch_add(1);
      if (trace) {
        std::fprintf(stderr, "sova fuzz: %zu bytes at %p do not hold tag %d (%d %d; checked on stream %p, by %s)\n",
                     bytes, static_cast<const void*>(p), tag, p[0], p[bytes - 1], static_cast<void*>(s), what);
      }
    });
  }
  /// With SOVA_FUZZ_TRACE: what an allocation asked and got.
  void detail(std::size_t bytes, int pool, cudaStream_t s, cudaError_t error) {
    char text[160];
    std::snprintf(text, sizeof text, " %zu from pool %d on stream %p: %s", bytes, pool, static_cast<void*>(s),
                  cudaGetErrorName(error));
    op_detail_ = text;
  }
  unsigned char new_tag() { return static_cast<unsigned char>(1 + (next_tag_++ % 250)); }

  void allocate() {
    int index = 0;
    if (pick_pool(&index) == nullptr) return;
    op_name_ = "allocate";
    const cudaStream_t s = pick_stream(w_.pools[index].device);
    (void)allocate_block(index, s, pick_size());
  }

  /// Allocates `bytes` from pool `index` on `s`, checking the answer; a block
  /// is tagged on `s` and kept (the last of mine_). Whether one was.
  bool allocate_block(int index, cudaStream_t s, std::size_t bytes) {
    Pool* pool = w_.pools[index].pool.get();
    const PoolStats before = w_.threaded ? PoolStats{} : pool->stats();
    const bool asleep = !w_.threaded && pool->asleep();
    void* out = reinterpret_cast<void*>(0x1);
    const cudaError_t error = pool->try_allocate(&out, bytes, s);
    if (trace_) detail(bytes, index, s, error);
    auto* p = static_cast<unsigned char*>(out);
    // The out-of-memory path's last step, a device synchronize, may come
    // before a success too, and its count only when it worked: any
    // allocation may have synchronized.
    may_synchronize(index);
    if (error == cudaSuccess) {
      if (bytes == 0) {
        FUZZ_CHECK(p == nullptr, "size 0 did not give NULL");
        return false;
      }
      FUZZ_CHECK(p != nullptr, "success without a block");
      FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0, "a block not 512-aligned");
      FUZZ_CHECK(pool->contains(p) && pool->contains(p + bytes - 1), "a block outside its pool");
      FUZZ_CHECK(pool->block_size(p) == bytes, "block_size disagrees with the request");
      FUZZ_CHECK(!asleep, "an asleep pool allocated");
      w_.add_live(p, bytes);
      const unsigned char tag = new_tag();
      write_tag(s, p, bytes, tag);
      mine_.push_back(Block{index, p, bytes, tag, s, true});
      bump(g_counts.allocations);
      if (!w_.threaded) w_.pools[index].marks.allocated(pool->stats(), true);
      return true;
    }
    bump(g_counts.failed_allocations);
    FUZZ_CHECK(p == nullptr, "a failed allocation left a pointer");
    if (asleep) {
      bump(g_counts.allocations_asleep);
      FUZZ_CHECK(error == cudaErrorNotPermitted,
                 std::string("an asleep pool's allocation: ") + cudaGetErrorName(error));
    } else {
      FUZZ_CHECK(error == cudaErrorMemoryAllocation || error == cudaErrorInvalidValue || error == cudaErrorUnknown,
                 std::string("an unexpected error: ") + cudaGetErrorName(error));
    }
    if (!w_.threaded) {
      const PoolStats after = pool->stats();
      FUZZ_CHECK(after.used_current == before.used_current && after.live_blocks == before.live_blocks &&
                     after.allocations == before.allocations,
                 "a failed allocation changed the pool");
      w_.pools[index].marks.allocated(after, false);
    }
    return false;
  }

  /// An event that `s` can record: one of s's device (CUDA refuses an event
  /// of another device, and so does the simulation).
  EventHandle event_for(cudaStream_t s) {
    int device = 0;
    FUZZ_CHECK(w_.sim.stream_device(s, &device) == cudaSuccess, "stream_device");
    EventHandle e = nullptr;
    FUZZ_CHECK(w_.sim.event_create_on(device, &e) == cudaSuccess, "event_create_on");
    return e;
  }

  /// Makes `t` wait for block `b`'s last use (as a user must, across streams).
  void order_after(const Block& b, cudaStream_t t) {
    if (!b.pending || b.last == t) return;
    EventHandle e = event_for(b.last);
    FUZZ_CHECK(w_.sim.event_record(e, b.last) == cudaSuccess, "event_record");
    FUZZ_CHECK(w_.sim.stream_wait_event(t, e) == cudaSuccess, "stream_wait_event");
    w_.sim.event_destroy(e);
  }

  void free_block(std::size_t i, cudaStream_t t) {
    Block b = mine_[i];
    mine_[i] = mine_.back();
    mine_.pop_back();
    Pool& pool = *w_.pools[b.pool].pool;
    order_after(b, t);
    // Asleep: the memory is unmapped, nothing may touch it; the free is final.
    if (!w_.threaded && pool.asleep()) {
      bump(g_counts.frees_asleep);
    } else {
      check_tag(t, b.p, b.bytes, b.tag);
    }
    const PoolStats before = w_.threaded ? PoolStats{} : pool.stats();
    w_.drop_live(b.p);  // before the free: another thread may get the address at once
    const cudaError_t error = pool.try_deallocate(b.p, t);
    FUZZ_CHECK(error == cudaSuccess, std::string("a valid free failed: ") + cudaGetErrorName(error));
    bump(g_counts.frees);
    if (!w_.threaded) {
      const PoolStats after = pool.stats();
      FUZZ_CHECK(after.used_current + b.bytes == before.used_current && after.live_blocks + 1 == before.live_blocks,
                 "a free did not count");
    }
    freed_.push_back(b);
    if (freed_.size() > 8) freed_.erase(freed_.begin());
  }

  void free_one() {
    op_name_ = "free";
    if (mine_.empty()) return;
    const std::size_t i = in_.below(mine_.size());
    free_block(i, pick_stream(w_.pools[mine_[i].pool].device));
  }

  /// A block freed on a stream of the other device than its pool's (as
  /// cudaFreeAsync allows), often with work still queued there, then often
  /// a trim or (single-threaded) the pool's destruction at once: every path
  /// that releases memory must wait for the freeing stream's device too.
  /// The stream is one of this actor's, or the implicit stream (legacy or
  /// per-thread) with the thread's current device switched for the free.
  void free_across_devices() {
    op_name_ = "free across devices";
    if (mine_.empty()) return;
    const std::size_t i = in_.below(mine_.size());
    const int index = mine_[i].pool;
    const int other = 1 - w_.pools[index].device;
    const bool implicit = in_.flag();
    // The implicit handles name another stream once the device is switched:
    // the block's last use is ordered by an event recorded before the switch.
    EventHandle ready = nullptr;
    if (implicit && mine_[i].pending) {
      ready = event_for(mine_[i].last);
      FUZZ_CHECK(w_.sim.event_record(ready, mine_[i].last) == cudaSuccess, "event_record");
    }
    if (implicit) FUZZ_CHECK(w_.sim.set_current_device(other) == cudaSuccess, "set_current_device");
    const cudaStream_t t = implicit ? (in_.flag() ? nullptr : cudaStreamPerThread) : pick_stream(other);
    if (ready != nullptr) {
      FUZZ_CHECK(w_.sim.stream_wait_event(t, ready) == cudaSuccess, "stream_wait_event");
      w_.sim.event_destroy(ready);
      mine_[i].last = t;  // ordered: free_block adds no wait
    }
    if (in_.flag()) w_.sim.delay(t, std::chrono::microseconds(100 + in_.below(2000)));  // work in flight
    free_block(i, t);
    if (implicit) FUZZ_CHECK(w_.sim.set_current_device(0) == cudaSuccess, "set_current_device");
    switch (in_.below(3)) {
      case 0:
        if (trim_unsafe(index)) break;
        may_synchronize(index);
        w_.pools[index].pool->trim_to(in_.flag() ? 0 : w_.granularity);
        break;
      case 1:
        if (!w_.threaded && !graphs_hold(index) && !any_capture_open()) {
          for (std::size_t j = mine_.size(); j-- > 0;) {
            if (mine_[j].pool == index) free_block(j, pick_stream(w_.pools[index].device));
          }
          std::erase_if(freed_, [&](const Block& b) { return b.pool == index; });
          w_.pools[index].pool.reset();  // waits for the device work that may use the memory
          w_.create_pool(index, in_);
        }
        break;
      default: break;
    }
  }

  void bad_free() {
    op_name_ = "bad free";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    const cudaStream_t t = pick_stream(w_.pools[index].device);
    void* q = nullptr;
    int local = 0;
    switch (in_.below(5)) {
      case 0: q = nullptr; break;  // valid: success, nothing changes
      case 1:                      // interior
        for (const Block& b : mine_) {
          if (b.pool != index) continue;
          q = b.p + (b.bytes > 512 && in_.flag() ? 512 : 1);
          break;
        }
        if (q == nullptr) return;
        break;
      case 2:  // double (single-threaded only: another thread may be handed the address meanwhile)
        if (w_.threaded || freed_.empty()) return;
        {
          const Block& b = freed_[in_.below(freed_.size())];
          if (b.pool != index || w_.is_live_start(b.p)) return;
          q = b.p;
        }
        break;
      case 3:  // another pool's live block
        for (const Block& b : mine_) {
          if (b.pool == index) continue;
          q = b.p;
          break;
        }
        if (q == nullptr) return;
        break;
      default: q = &local; break;  // host memory
    }
    const PoolStats before = w_.threaded ? PoolStats{} : pool->stats();
    const cudaError_t error = pool->try_deallocate(q, t);
    if (q != nullptr) bump(g_counts.refused_frees);
    FUZZ_CHECK(error == (q == nullptr ? cudaSuccess : cudaErrorInvalidValue),
               std::string("a bad free was not refused: ") + cudaGetErrorName(error));
    if (!w_.threaded) {
      const PoolStats after = pool->stats();
      FUZZ_CHECK(after.used_current == before.used_current && after.live_blocks == before.live_blocks &&
                     after.deallocations == before.deallocations && after.reserved_current == before.reserved_current,
                 "a refused free changed the pool");
    }
  }

  void streams() {
    op_name_ = "streams";
    if (in_.flag() && streams_.size() < kMaxStreams) {
      const int device = static_cast<int>(in_.below(2));
      streams_.emplace_back(w_.sim.create_stream(in_.flag(), device), device);
      return;
    }
    if (streams_.empty()) return;
    const std::size_t i = in_.below(streams_.size());
    const cudaStream_t s = streams_[i].first;
    // Its work must be done before the handle goes (a later free orders
    // nothing after a destroyed stream); the handle may come back on the
    // next create, as CUDA's do.
    FUZZ_CHECK(w_.sim.stream_synchronize(s) == cudaSuccess, "stream_synchronize");
    for (Block& b : mine_)
      if (b.last == s) b.pending = false;
    for (auto& g : graphs_)
      if (g->has_last_use && g->last_use == s) g->has_last_use = false;
    w_.sim.destroy_stream(s);
    bump(g_counts.streams_destroyed);
    streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void trim() {
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    op_name_ = "trim";
    const std::size_t keeps[] = {0, w_.granularity, 5 * kMiB, SIZE_MAX};
    const std::uint64_t used = w_.threaded ? 0 : pool->stats().used_current;
    if (trim_unsafe(index)) return;
    if (!w_.threaded && pool->asleep()) bump(g_counts.trims_asleep);
    may_synchronize(index);
    try {
      pool->trim_to(keeps[in_.below(4)]);
    } catch (const Error& e) {
      FUZZ_CHECK(false, std::string("trim_to threw: ") + e.what());
    }
    if (!w_.threaded) FUZZ_CHECK(pool->stats().used_current == used, "trim_to changed used bytes");
  }

  void attribute() {
    op_name_ = "attribute";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    // 0..15: the enum's range (values 1..8 are attributes), so C++ may hold them.
    const int raw = static_cast<int>(in_.below(16));
    const auto attr = static_cast<cudaMemPoolAttr>(raw);
    const bool known = raw >= 1 && raw <= 8;
    if (in_.flag()) {
      std::uint64_t value64 = in_.flag() ? 0 : in_.u64();
      int value32 = static_cast<int>(in_.byte());
      const bool int_valued = raw >= 1 && raw <= 3;
      const PoolStats before = w_.threaded ? PoolStats{} : pool->stats();
      const cudaError_t error = pool->set_attribute(attr, int_valued ? static_cast<void*>(&value32) : &value64);
      if (!w_.threaded && error == cudaSuccess && value64 == 0) {
        MarkModel& marks = w_.pools[index].marks;
        if (raw == cudaMemPoolAttrUsedMemHigh) marks.used_reset(pool->stats());
        if (raw == cudaMemPoolAttrReservedMemHigh) marks.reserved_reset(before, pool->stats());
      }
      const bool settable = raw >= 1 && raw <= 4;
      const bool resettable =
          (raw == cudaMemPoolAttrReservedMemHigh || raw == cudaMemPoolAttrUsedMemHigh) && value64 == 0;
      FUZZ_CHECK(error == (settable || resettable ? cudaSuccess : cudaErrorInvalidValue), "set_attribute's answer");
      return;
    }
    std::uint64_t value = 0;
    const cudaError_t error = pool->get_attribute(attr, &value);
    FUZZ_CHECK(error == (known ? cudaSuccess : cudaErrorInvalidValue), "get_attribute's answer");
    if (!w_.threaded && raw == cudaMemPoolAttrUsedMemCurrent && !graphs_hold_unreleased(index)) {
      std::uint64_t model = 0;
      for (const Block& b : mine_)
        if (b.pool == index) model += b.bytes;
      model += released_outputs_bytes(index);
      FUZZ_CHECK(value == model, "UsedMemCurrent differs from the live blocks' bytes");
    }
  }

  void access() {
    op_name_ = "access";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    cudaMemAccessDesc desc;
    std::memset(&desc, 0, sizeof desc);
    const int type = in_.below(8) == 0 ? static_cast<int>(in_.below(5)) : cudaMemLocationTypeDevice;
    desc.location.type = static_cast<cudaMemLocationType>(type);
    desc.location.id = static_cast<int>(in_.below(3)) - (in_.below(8) == 0 ? 3 : 0);
    const int flags = static_cast<int>(in_.below(4));  // 2 is none of the enum's values
    desc.flags = static_cast<cudaMemAccessFlags>(flags);
    cudaMemAccessFlags was = cudaMemAccessFlagsProtNone;
    const bool valid_device = desc.location.id >= 0 && desc.location.id < 2;
    if (type == cudaMemLocationTypeDevice && valid_device) {
      FUZZ_CHECK(pool->get_access(&was, &desc.location) == cudaSuccess, "get_access");
    }
    const cudaError_t error = pool->set_access(&desc, 1);
    const int own = w_.pools[index].device;
    cudaError_t expected = cudaSuccess;
    if (type != cudaMemLocationTypeDevice || flags == 2) {
      expected = cudaErrorInvalidValue;
    } else if (!valid_device || (desc.location.id == own && flags != cudaMemAccessFlagsProtReadWrite)) {
      expected = cudaErrorInvalidDevice;
    }
    // An injected set-access failure is the driver's error.
    FUZZ_CHECK(error == expected || (expected == cudaSuccess && error != cudaSuccess),
               std::string("set_access's answer: ") + cudaGetErrorName(error));
    if (type == cudaMemLocationTypeDevice && valid_device && !w_.threaded) {
      cudaMemAccessFlags now = cudaMemAccessFlagsProtNone;
      FUZZ_CHECK(pool->get_access(&now, &desc.location) == cudaSuccess, "get_access");
      FUZZ_CHECK(now == (error == cudaSuccess ? desc.flags : was), "get_access disagrees with set_access");
    }
  }

  void inject() {
    op_name_ = "inject";
    const int n = 1 + static_cast<int>(in_.below(3));
    const cudaError_t errors[] = {cudaErrorMemoryAllocation, cudaErrorUnknown};
    const cudaError_t error = errors[in_.below(2)];
    switch (in_.below(3)) {
      case 0: w_.sim.fail_physical_create_at(n, error); break;
      case 1: w_.sim.fail_map_at(n, error); break;
      default: w_.sim.fail_set_access_at(n, error); break;
    }
  }

  void synchronize() {
    op_name_ = "synchronize";
    int index = 0;
    Pool* pool = pick_pool(&index);
    switch (in_.below(3)) {
      case 0: {  // a stream, then tell a pool so
        const cudaStream_t s = pick_stream(pool != nullptr ? w_.pools[index].device : 0);
        FUZZ_CHECK(w_.sim.stream_synchronize(s) == cudaSuccess, "stream_synchronize");
        for (Block& b : mine_)
          if (b.last == s) b.pending = false;
        // Pool::stream_synchronized's contract: nothing runs on `s` any more.
        // The legacy stream is shared by every actor: in threaded runs another
        // may have queued work (a tag check) and a free there since the
        // synchronize above, and telling the pool would let it unmap memory
        // that work still reads (a crash in 1 of 5 runs, the interpreter's
        // own misuse, not the pool's).
        const bool mine_alone = !(w_.threaded && s == nullptr);
        if (pool != nullptr && in_.flag() && mine_alone) pool->stream_synchronized(s);
        return;
      }
      default: {  // everything: then every block of this actor holds its tag
        if (any_capture_open()) {
          // A device synchronize would invalidate the captures: each block's stream instead.
          for (Block& b : mine_) {
            if (b.pending) FUZZ_CHECK(w_.sim.stream_synchronize(b.last) == cudaSuccess, "stream_synchronize");
          }
        } else {
          FUZZ_CHECK(w_.sim.device_synchronize(0) == cudaSuccess && w_.sim.device_synchronize(1) == cudaSuccess,
                     "device_synchronize");
        }
        for (Block& b : mine_) {
          b.pending = false;
          if (!w_.threaded && w_.pools[b.pool].pool->asleep()) continue;  // unmapped: not to be touched
          FUZZ_CHECK(Tags::holds(b.p, b.bytes, b.tag), "a live block lost its tag");
        }
        return;
      }
    }
  }

  void handoff() {
    op_name_ = "handoff";
    if (!w_.threaded) return;
    if (in_.flag() && !mine_.empty()) {  // give one away
      const std::size_t i = in_.below(mine_.size());
      Handoff h{mine_[i], nullptr};
      mine_[i] = mine_.back();
      mine_.pop_back();
      if (h.block.pending) {
        h.ready = event_for(h.block.last);
        FUZZ_CHECK(w_.sim.event_record(h.ready, h.block.last) == cudaSuccess, "event_record");
      }
      std::lock_guard lock(w_.mu);
      w_.handoffs.push_back(h);
      return;
    }
    Handoff h;
    {
      std::lock_guard lock(w_.mu);
      if (w_.handoffs.empty()) return;
      h = w_.handoffs.front();
      w_.handoffs.pop_front();
    }
    const cudaStream_t t = pick_stream(w_.pools[h.block.pool].device);
    if (h.ready != nullptr) {
      FUZZ_CHECK(w_.sim.stream_wait_event(t, h.ready) == cudaSuccess, "stream_wait_event");
      w_.sim.event_destroy(h.ready);
    }
    bump(g_counts.handoffs);
    h.block.last = t;  // this thread's stream now orders the block's use
    h.block.pending = true;
    mine_.push_back(h.block);
  }

  /// Single-threaded only: a pool is destroyed (its blocks freed first) and
  /// another made in its place.
  void pool_lifecycle() {
    if (w_.threaded) return;
    op_name_ = "pool lifecycle";
    const int index = static_cast<int>(in_.below(kMaxPools));
    if (trace_) op_detail_ = " of pool " + std::to_string(index);
    if (w_.pools[index].pool) {
      if (graphs_hold(index)) return;  // destroy graphs before their pool (docs/graphs.md)
      // Not while a capture is open: the destructor's device synchronize is
      // refused then, and it unmaps memory that queued work still uses
      // (docs/fuzzing.md, "Known defects").
      if (any_capture_open()) return;
      for (std::size_t i = mine_.size(); i-- > 0;) {
        if (mine_[i].pool == index) free_block(i, pick_stream(w_.pools[index].device));
      }
      std::erase_if(freed_, [&](const Block& b) { return b.pool == index; });
      w_.pools[index].pool->check_invariants();
      w_.pools[index].pool.reset();
    }
    w_.create_pool(index, in_);
  }

  // ---- captures and graphs (one thread; docs/graphs.md) -----------------------
  GraphRecord* open_capture() {
    for (auto& g : graphs_)
      if (g->capturing) return g.get();
    return nullptr;
  }
  bool any_capture_open() { return open_capture() != nullptr || foreign_.open; }
  /// Whether a graph (or a capture) holds or held memory of `pool` that the
  /// model still follows: the pool must not be destroyed.
  bool graphs_hold(int pool) {
    for (auto& g : graphs_)
      if (g->tried(pool)) return true;
    return false;
  }
  bool graphs_hold_unreleased(int pool) {
    for (auto& g : graphs_)
      if (!g->released && g->tried(pool)) return true;
    return false;
  }
  /// The bytes of released graphs' blocks that the caller still holds: ordinary blocks now.
  std::uint64_t released_outputs_bytes(int pool) {
    std::uint64_t bytes = 0;
    for (auto& g : graphs_) {
      if (!g->released) continue;
      for (const GraphBlock& b : g->blocks)
        if (b.pool == pool && !b.freed_in_graph && !b.caller_freed) bytes += b.counted;
    }
    return bytes;
  }
  /// A call that may synchronize the device comes (a trim, the out-of-memory
  /// path, a pool's destruction: `pool` -1): a capture that did not allocate
  /// from that pool is unknown to it and may be invalidated (docs/graphs.md,
  /// "Device synchronizes wait").
  void may_synchronize(int pool) {
    if (w_.threaded) return;
    for (auto& g : graphs_)
      if (g->capturing && (pool < 0 || !g->uses(pool))) g->op_may_sync = true;
    if (foreign_.open) foreign_.op_may_sync = true;
  }
  /// After each operation: an open capture found invalidated must owe it to
  /// a call of that operation documented to synchronize the device.
  void check_captures() {
    for (auto& g : graphs_) {
      if (!g->capturing) continue;
      CaptureInfo info;
      FUZZ_CHECK(w_.sim.stream_capture_info(g->origin, &info) == cudaSuccess, "stream_capture_info");
      if (info.status == cudaStreamCaptureStatusInvalidated && !g->exposed) {
        if (!g->op_may_sync) {
          // Not this operation's call: the release worker's reclaim of a
          // pool that does not know the capture (documented), the only
          // device synchronize that comes on its own.
          bool unknown_pool = false;
          for (int i = 0; i < kMaxPools; ++i)
            if (w_.pools[i].pool && !g->uses(i)) unknown_pool = true;
          // (The simulation's count of device synchronizes cannot tell: the
          // worker's refused call is not counted, its next may come later.)
          FUZZ_CHECK(unknown_pool,
                     "the capture was invalidated by an operation that must not synchronize the "
                     "device, though every pool knows the capture");
        }
        g->exposed = true;
      }
      g->op_may_sync = false;
    }
    ForeignCapture& f = foreign_;
    if (f.open) {
      CaptureInfo info;
      FUZZ_CHECK(w_.sim.stream_capture_info(f.stream, &info) == cudaSuccess, "stream_capture_info");
      if (info.status == cudaStreamCaptureStatusInvalidated && !f.invalidated_seen) {
        f.invalidated_seen = true;
        f.exposed = f.op_may_sync;
      }
      f.op_may_sync = false;
    }
  }
  /// A trim of `pool` may synchronize the device and so invalidate an open
  /// capture that did not allocate from it (documented): the interpreter
  /// leaves such trims out, so that captures live long enough to be tested.
  bool trim_unsafe(int pool) {
    if (w_.threaded) return false;
    GraphRecord* open = open_capture();
    return open != nullptr && !open->uses(pool);
  }
  /// A pool of `device` that sees captures, or -1.
  int pick_capture_pool(int device) {
    const int start = static_cast<int>(in_.below(kMaxPools));
    for (int k = 0; k < kMaxPools; ++k) {
      const int i = (start + k) % kMaxPools;
      if (w_.pools[i].pool && w_.pools[i].device == device && w_.pools[i].check_streams) return i;
    }
    return -1;
  }
  template <class Pred>
  GraphRecord* pick_graph(Pred pred) {
    std::vector<GraphRecord*> choices;
    for (auto& g : graphs_)
      if (pred(*g)) choices.push_back(g.get());
    if (choices.empty()) return nullptr;
    return choices[in_.below(choices.size())];
  }
  /// Makes `t` wait for `from`'s work so far (nothing if the same stream).
  void wait_for(cudaStream_t t, cudaStream_t from) {
    if (t == from) return;
    EventHandle e = event_for(from);
    FUZZ_CHECK(w_.sim.event_record(e, from) == cudaSuccess, "event_record");
    FUZZ_CHECK(w_.sim.stream_wait_event(t, e) == cudaSuccess, "stream_wait_event");
    w_.sim.event_destroy(e);
  }

  void extended() {
    op_name_ = "extended";
    const std::size_t which = in_.below(20);
    if (w_.threaded) return;  // one-thread operations
    if (which < 8) {
      graph_step();
    } else if (which < 10) {
      foreign_step();
    } else if (which < 14) {
      sleep_step();
    } else if (which < 16 || which == 19) {
      sleep_host_step();
    } else if (which == 16) {
      wake_with_frees();
    } else if (which == 17) {
      failed_growth_then_release();
    } else {
      streams_once();
    }
  }

  void graph_step() {
    if (GraphRecord* open = open_capture()) {
      switch (in_.below(10)) {
        case 0:
        case 1:
        case 2:
        case 3: capture_allocate(*open); break;
        case 4:
        case 5: capture_free(*open); break;
        case 6: capture_use(*open); break;
        case 7: capture_free_earlier(*open); break;
        default: capture_end(*open); break;
      }
      return;
    }
    switch (graphs_.empty() ? 0 : in_.below(9)) {
      case 0:
      case 1: capture_begin(); break;
      case 2: instantiate(); break;
      case 3:
      case 4: launch(); break;
      case 5:
      case 6: destroy_handle(); break;
      default: free_output(); break;
    }
  }

  void capture_begin() {
    op_name_ = "capture begin";
    if (graphs_.size() >= 4) return;
    auto g = std::make_unique<GraphRecord>();
    g->id = next_graph_id_++;
    g->device = static_cast<int>(in_.below(2));
    const cudaStreamCaptureMode modes[] = {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal,
                                           cudaStreamCaptureModeRelaxed};
    g->mode = modes[in_.below(3)];
    g->origin = w_.sim.create_stream(false, g->device);
    g->syncs_at_begin = w_.sim.counters().device_synchronizes;
    FUZZ_CHECK(w_.sim.begin_capture(g->origin, g->mode) == cudaSuccess, "begin_capture");
    bump(g_counts.captures);
    graphs_.push_back(std::move(g));
    // Allocate at once, most often: the pool then knows the capture and
    // keeps its device synchronizes off (docs/graphs.md, "Device synchronizes wait").
    if (in_.below(4) != 0) capture_allocate(*graphs_.back());
  }

  /// The capture is still valid, unless something documented may have invalidated it.
  void check_capture_active(GraphRecord& g, const char* after) {
    CaptureInfo info;
    FUZZ_CHECK(w_.sim.stream_capture_info(g.origin, &info) == cudaSuccess, "stream_capture_info");
    FUZZ_CHECK(g.exposed || g.op_may_sync || info.status == cudaStreamCaptureStatusActive,
               std::string("the capture was invalidated (") + after + ")");
  }

  void capture_allocate(GraphRecord& g) {
    op_name_ = "capture allocate";
    const int index = pick_capture_pool(g.device);
    if (index < 0) return;
    Pool* pool = w_.pools[index].pool.get();
    const std::size_t bytes = in_.below(4) == 0 ? pick_size() : 1 + in_.below(64) * 4096 + in_.below(1024);
    const bool asleep = pool->asleep();
    const PoolStats before = pool->stats();
    void* out = reinterpret_cast<void*>(0x1);
    const cudaError_t error = pool->try_allocate(&out, bytes, g.origin);
    if (!g.tried(index)) g.pools_tried.push_back(index);
    w_.pools[index].marks.inexact_used();  // a graph's release may give its memory back on a driver thread
    w_.pools[index].marks.allocated(pool->stats(), error == cudaSuccess);
    if (trace_) detail(bytes, index, g.origin, error);
    auto* p = static_cast<unsigned char*>(out);
    if (error == cudaSuccess) {
      if (bytes == 0) {
        FUZZ_CHECK(p == nullptr, "size 0 did not give NULL (capture)");
        return;
      }
      FUZZ_CHECK(!asleep, "an asleep pool allocated under capture");
      FUZZ_CHECK(p != nullptr, "success without a block (capture)");
      FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0, "a graph block not 512-aligned");
      FUZZ_CHECK(pool->contains(p) && pool->contains(p + bytes - 1), "a graph block outside its pool");
      w_.add_live(p, bytes, g.id);
      {
        std::lock_guard lock(w_.mu);
        w_.held.push_back(World::Held{reinterpret_cast<std::uintptr_t>(p), bytes, g.id});
      }
      const unsigned char tag = new_tag();
      write_tag(g.origin, p, bytes, tag);  // a node of the graph
      // A block freed earlier in the capture and reused here counts this
      // allocation's size from now on (GraphBlockSource::requested).
      for (GraphBlock& freed : g.blocks) {
        if (freed.freed_in_graph && freed.p == p && freed.pool == index && freed.counted != 0) {
          freed.counted = 0;
          break;
        }
      }
      g.blocks.push_back(GraphBlock{index, p, bytes, tag, bytes});
      if (!g.uses(index)) g.pools_used.push_back(index);
      bump(g_counts.graph_allocations);
      return;
    }
    bump(g_counts.graph_failed_allocations);
    FUZZ_CHECK(p == nullptr, "a failed allocation left a pointer (capture)");
    if (asleep) {
      FUZZ_CHECK(error == cudaErrorNotPermitted,
                 std::string("an asleep pool's allocation under capture: ") + cudaGetErrorName(error));
    } else {
      FUZZ_CHECK(error == cudaErrorMemoryAllocation || error == cudaErrorInvalidValue || error == cudaErrorUnknown ||
                     (g.exposed && error == cudaErrorStreamCaptureInvalidated),
                 std::string("an unexpected error under capture: ") + cudaGetErrorName(error));
    }
    const PoolStats after = pool->stats();
    FUZZ_CHECK(after.used_current == before.used_current && after.live_blocks == before.live_blocks &&
                   after.allocations == before.allocations,
               "a failed allocation under capture changed the pool");
    check_capture_active(g, "after a failed allocation under capture");
  }

  GraphBlock* pick_graph_block(GraphRecord& g, bool outputs_only) {
    std::vector<GraphBlock*> choices;
    for (GraphBlock& b : g.blocks)
      if (!b.freed_in_graph && !(outputs_only && b.caller_freed)) choices.push_back(&b);
    if (choices.empty()) return nullptr;
    return choices[in_.below(choices.size())];
  }

  void capture_free(GraphRecord& g) {
    op_name_ = "capture free";
    GraphBlock* b = pick_graph_block(g, false);
    if (b == nullptr) return;
    check_tag(g.origin, b->p, b->bytes, b->tag);  // a node: the block holds what the graph wrote
    const cudaError_t error = w_.pools[b->pool].pool->try_deallocate(b->p, g.origin);
    if (g.exposed && error == cudaErrorStreamCaptureInvalidated) return;  // invalidated: the block stays
    FUZZ_CHECK(error == cudaSuccess, std::string("a free in the capture failed: ") + cudaGetErrorName(error));
    b->freed_in_graph = true;
    w_.drop_live(b->p);  // reusable by this capture's later allocations on this stream
    bump(g_counts.graph_frees);
  }

  void capture_use(GraphRecord& g) {
    op_name_ = "capture use";
    GraphBlock* b = pick_graph_block(g, false);
    if (b == nullptr) return;
    if (in_.flag()) {
      b->tag = new_tag();
      write_tag(g.origin, b->p, b->bytes, b->tag);
    } else {
      check_tag(g.origin, b->p, b->bytes, b->tag);
    }
  }

  /// A free under capture of a block allocated before it: refused, nothing changes.
  void capture_free_earlier(GraphRecord& g) {
    op_name_ = "capture free of an earlier block";
    std::vector<std::size_t> choices;
    for (std::size_t i = 0; i < mine_.size(); ++i)
      if (w_.pools[mine_[i].pool].check_streams) choices.push_back(i);
    if (choices.empty()) return;
    const Block& b = mine_[choices[in_.below(choices.size())]];
    Pool& pool = *w_.pools[b.pool].pool;
    const PoolStats before = pool.stats();
    const cudaError_t error = pool.try_deallocate(b.p, g.origin);
    FUZZ_CHECK(error == cudaErrorStreamCaptureUnsupported,
               std::string("a free under capture of an earlier block: ") + cudaGetErrorName(error));
    const PoolStats after = pool.stats();
    FUZZ_CHECK(after.used_current == before.used_current && after.live_blocks == before.live_blocks &&
                   after.deallocations == before.deallocations && after.reserved_current == before.reserved_current,
               "a refused free under capture changed the pool");
    FUZZ_CHECK(pool.block_size(b.p) == b.bytes, "a refused free under capture freed the block");
    bump(g_counts.capture_frees_refused);
    check_capture_active(g, "after a refused free");
  }

  void capture_end(GraphRecord& g) {
    op_name_ = "capture end";
    cudaGraph_t graph = nullptr;
    const cudaError_t error = w_.sim.end_capture(g.origin, &graph);
    g.capturing = false;
    if (error == cudaSuccess) {
      g.graph = graph;
      bump(g_counts.captures_ended);
      if (in_.below(4) != 0) {  // most often: instantiated, and launched, at once
        cudaGraphExec_t exec = nullptr;
        FUZZ_CHECK(w_.sim.graph_instantiate(&exec, g.graph) == cudaSuccess, "graph_instantiate");
        g.execs.push_back(exec);
        if (in_.flag()) launch_graph(g);
      }
      return;
    }
    FUZZ_CHECK(error == cudaErrorStreamCaptureInvalidated, std::string("end_capture: ") + cudaGetErrorName(error));
    const bool synchronized = w_.sim.counters().device_synchronizes != g.syncs_at_begin;
    FUZZ_CHECK(g.exposed || g.op_may_sync,
               std::string("a capture was invalidated, with no call documented "
                           "to synchronize the device during it (") +
                   (synchronized ? "the device was synchronized" : "no device synchronize") + ")");
    bump(g_counts.captures_invalidated);
    // The runtime destroyed the graph: its memory comes back; what it handed
    // out and nobody freed is the caller's (never written: no launch).
    release_graph(g);
  }

  void instantiate() {
    op_name_ = "graph instantiate";
    GraphRecord* g = pick_graph([](const GraphRecord& r) { return r.graph != nullptr && r.execs.size() < 3; });
    if (g == nullptr) return;
    cudaGraphExec_t exec = nullptr;
    FUZZ_CHECK(w_.sim.graph_instantiate(&exec, g->graph) == cudaSuccess, "graph_instantiate");
    g->execs.push_back(exec);
  }

  void launch() {
    op_name_ = "graph launch";
    GraphRecord* g = pick_graph([](const GraphRecord& r) { return !r.execs.empty(); });
    if (g != nullptr) launch_graph(*g);
  }
  void launch_graph(GraphRecord& graph) {
    GraphRecord* g = &graph;
    for (int pool : g->pools_used)
      if (w_.pools[pool].pool->asleep()) return;  // its memory is unmapped: the caller must wake the pool first
    std::vector<cudaStream_t> choices{g->origin};
    for (const auto& [s, d] : streams_)
      if (d == g->device) choices.push_back(s);
    if (g->device == 0) {
      choices.push_back(nullptr);
      choices.push_back(cudaStreamPerThread);
    }
    const int n = 1 + static_cast<int>(in_.below(3));
    for (int k = 0; k < n; ++k) {
      const cudaStream_t l = choices[in_.below(choices.size())];
      const cudaGraphExec_t exec = g->execs[in_.below(g->execs.size())];
      // Launches of one graph's executables use the same memory: each after the last.
      if (g->has_last_use) wait_for(l, g->last_use);
      FUZZ_CHECK(w_.sim.graph_launch(exec, l) == cudaSuccess, "graph_launch");
      if (trace_) std::fprintf(stderr, "sova fuzz:   graph %d launched on %p\n", g->id, static_cast<void*>(l));
      g->last_use = l;
      g->has_last_use = true;
      bump(g_counts.graph_launches);
    }
    // What the graph left live reads back after the launch.
    for (GraphBlock& b : g->blocks) {
      if (b.freed_in_graph || b.caller_freed) continue;
      b.tag_known = true;
      check_tag(g->last_use, b.p, b.bytes, b.tag);
    }
  }

  void destroy_handle() {
    op_name_ = "graph destroy";
    GraphRecord* g = pick_graph([](const GraphRecord& r) { return r.graph != nullptr || !r.execs.empty(); });
    if (g == nullptr) return;
    const std::size_t handles = g->execs.size() + (g->graph != nullptr ? 1 : 0);
    const std::size_t k = in_.below(handles);
    if (k < g->execs.size()) {
      FUZZ_CHECK(w_.sim.graph_exec_destroy(g->execs[k]) == cudaSuccess, "graph_exec_destroy");
      g->execs.erase(g->execs.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      FUZZ_CHECK(w_.sim.graph_destroy(g->graph) == cudaSuccess, "graph_destroy");
      g->graph = nullptr;
    }
    if (g->graph != nullptr || !g->execs.empty()) return;
    // The last handle: once the launches are done the release callback has
    // run (on the simulation, by the time the synchronize returns).
    if (g->has_last_use) {
      FUZZ_CHECK(w_.sim.stream_synchronize(g->last_use) == cudaSuccess, "stream_synchronize");
      g->has_last_use = false;
    }
    release_graph(*g);
  }

  /// The model's side of a graph's release; then its memory must be back
  /// once a statistics read or a trim has run (docs/graphs.md, "When memory comes back").
  void release_graph(GraphRecord& g) {
    {
      std::lock_guard lock(w_.mu);
      std::erase_if(w_.held, [&](const World::Held& h) { return h.graph == g.id; });
    }
    g.released = true;
    bump(g_counts.graphs_released);
    for (int index : g.pools_tried) {
      Pool* pool = w_.pools[index].pool.get();
      if (pool == nullptr || graphs_hold_unreleased(index)) continue;
      switch (in_.below(5)) {
        case 0: (void)pool->stats(); break;
        case 1: {
          std::uint64_t v = 0;
          (void)pool->get_attribute(cudaMemPoolAttrUsedMemCurrent, &v);
          break;
        }
        case 2: (void)pool->graph_memory_stats(); break;
        case 3:
          may_synchronize(index);
          pool->trim_to(SIZE_MAX);
          break;
        default:
          may_synchronize(index);
          pool->trim_graph_memory();
          break;
      }
      const GraphMemoryStats gs = pool->graph_memory_stats();
      FUZZ_CHECK(gs.graphs == 0 && gs.held_bytes == 0 && gs.held_blocks == 0,
                 "a released graph's memory is not back (graphs " + std::to_string(gs.graphs) + ", held bytes " +
                     std::to_string(gs.held_bytes) + ", blocks " + std::to_string(gs.held_blocks) + ")");
      std::uint64_t model = released_outputs_bytes(index);
      for (const Block& b : mine_)
        if (b.pool == index) model += b.bytes;
      FUZZ_CHECK(pool->stats().used_current == model,
                 "after a graph's release, used bytes differ from the blocks held (" +
                     std::to_string(pool->stats().used_current) + " against " + std::to_string(model) + ")");
      bump(g_counts.memory_back_checks);
    }
  }

  /// The caller frees a block a graph left live (outside capture), ordered
  /// after the graph's last launch as a user must.
  void free_output() {
    op_name_ = "free a graph's output";
    GraphRecord* g = pick_graph([](const GraphRecord& r) {
      if (r.capturing) return false;
      for (const GraphBlock& b : r.blocks)
        if (!b.freed_in_graph && !b.caller_freed) return true;
      return false;
    });
    if (g == nullptr) return;
    GraphBlock* b = pick_graph_block(*g, true);
    Pool& pool = *w_.pools[b->pool].pool;
    const cudaStream_t t = pick_stream(w_.pools[b->pool].device);
    if (g->has_last_use) wait_for(t, g->last_use);
    const bool asleep = pool.asleep();
    if (b->tag_known && !asleep) check_tag(t, b->p, b->bytes, b->tag);
    const PoolStats before = pool.stats();
    w_.drop_live(b->p);
    const cudaError_t error = pool.try_deallocate(b->p, t);
    FUZZ_CHECK(error == cudaSuccess, std::string("freeing a graph's output failed: ") + cudaGetErrorName(error));
    b->caller_freed = true;
    bump(g_counts.output_frees);
    if (asleep) bump(g_counts.frees_asleep);
    const PoolStats after = pool.stats();
    if (g->released) {
      FUZZ_CHECK(after.used_current + b->counted == before.used_current,
                 "a released graph's output's free did not count");
    }
    if (in_.below(4) == 0) {  // once only
      const cudaError_t again = pool.try_deallocate(b->p, t);
      FUZZ_CHECK(again == cudaErrorInvalidValue,
                 std::string("a second free of a graph's output: ") + cudaGetErrorName(again));
      FUZZ_CHECK(pool.stats().used_current == after.used_current, "a refused second free changed used bytes");
    }
    if (g->released) forget_if_done(*g);
  }

  /// A released graph whose outputs are all freed leaves the model.
  void forget_if_done(GraphRecord& g) {
    for (const GraphBlock& b : g.blocks)
      if (!b.freed_in_graph && !b.caller_freed) return;
    FUZZ_CHECK(w_.sim.stream_synchronize(g.origin) == cudaSuccess, "stream_synchronize");
    w_.sim.destroy_stream(g.origin);
    std::erase_if(graphs_, [&](const std::unique_ptr<GraphRecord>& r) { return r.get() == &g; });
  }

  /// Ends what is open, destroys every graph, frees every output.
  void finish_graphs() {
    if (w_.threaded) return;
    if (foreign_.open) end_foreign();
    if (GraphRecord* open = open_capture()) capture_end(*open);
    while (!graphs_.empty()) {
      GraphRecord& g = *graphs_.front();
      if (!g.released) {
        while (g.graph != nullptr || !g.execs.empty()) destroy_handle_of(g);
      }
      for (GraphBlock& b : g.blocks) {
        if (b.freed_in_graph || b.caller_freed) continue;
        Pool& pool = *w_.pools[b.pool].pool;
        const cudaStream_t t = any_stream(w_.pools[b.pool].device);
        if (g.has_last_use) wait_for(t, g.last_use);
        if (b.tag_known && !pool.asleep()) check_tag(t, b.p, b.bytes, b.tag);
        w_.drop_live(b.p);
        FUZZ_CHECK(pool.try_deallocate(b.p, t) == cudaSuccess, "freeing a graph's output");
        b.caller_freed = true;
      }
      forget_if_done(g);
    }
  }
  void destroy_handle_of(GraphRecord& g) {
    if (!g.execs.empty()) {
      FUZZ_CHECK(w_.sim.graph_exec_destroy(g.execs.back()) == cudaSuccess, "graph_exec_destroy");
      g.execs.pop_back();
    } else {
      FUZZ_CHECK(w_.sim.graph_destroy(g.graph) == cudaSuccess, "graph_destroy");
      g.graph = nullptr;
    }
    if (g.graph != nullptr || !g.execs.empty()) return;
    if (g.has_last_use) {
      FUZZ_CHECK(w_.sim.stream_synchronize(g.last_use) == cudaSuccess, "stream_synchronize");
      g.has_last_use = false;
    }
    release_graph(g);
  }

  // ---- a capture beside the pools' ------------------------------------------------
  void foreign_step() {
    op_name_ = "foreign capture";
    ForeignCapture& f = foreign_;
    if (!f.open) {
      f = ForeignCapture{};
      f.device = static_cast<int>(in_.below(2));
      f.stream = w_.sim.create_stream(false, f.device);
      FUZZ_CHECK(w_.sim.begin_capture(f.stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin_capture");
      f.open = true;
      bump(g_counts.foreign_captures);
    }
    if (in_.below(3) != 0) {
      auto ran = f.ran;
      w_.sim.launch(f.stream, [ran] { ran->fetch_add(1); });
      ++f.nodes;
      return;
    }
    end_foreign();
  }
  void end_foreign() {
    ForeignCapture& f = foreign_;
    cudaGraph_t graph = nullptr;
    const cudaError_t error = w_.sim.end_capture(f.stream, &graph);
    f.open = false;
    if (error == cudaSuccess) {
      bump(g_counts.foreign_ended);
      cudaGraphExec_t exec = nullptr;
      FUZZ_CHECK(w_.sim.graph_instantiate(&exec, graph) == cudaSuccess, "graph_instantiate");
      FUZZ_CHECK(w_.sim.graph_launch(exec, f.stream) == cudaSuccess, "graph_launch");
      FUZZ_CHECK(w_.sim.stream_synchronize(f.stream) == cudaSuccess, "stream_synchronize");
      FUZZ_CHECK(f.ran->load() == f.nodes, "a foreign graph did not run its work");
      FUZZ_CHECK(w_.sim.graph_exec_destroy(exec) == cudaSuccess, "graph_exec_destroy");
      FUZZ_CHECK(w_.sim.graph_destroy(graph) == cudaSuccess, "graph_destroy");
    } else {
      FUZZ_CHECK(error == cudaErrorStreamCaptureInvalidated, std::string("end_capture: ") + cudaGetErrorName(error));
      bump(g_counts.foreign_invalidated);
      if (!f.exposed && !f.op_may_sync) bump(g_counts.foreign_invalidated_unexplained);
      FUZZ_CHECK(!w_.options.strict_foreign_captures,
                 std::string("sova invalidated a capture beside the pools'") +
                     (f.exposed || f.op_may_sync ? " (by a trim, an allocation or a pool's destruction)"
                                                 : " (by an operation not documented to synchronize the device)"));
    }
    FUZZ_CHECK(w_.sim.stream_synchronize(f.stream) == cudaSuccess, "stream_synchronize");
    w_.sim.destroy_stream(f.stream);
  }

  // ---- sleep and wake (one thread; docs/sleep-wake.md) -------------------------------
  void sleep_step() {
    op_name_ = "sleep/wake";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    // Mostly wake an asleep pool, if there is one: allocations wait for it.
    for (int k = 0; k < kMaxPools && !pool->asleep() && in_.below(4) != 0; ++k) {
      if (w_.pools[k].pool && w_.pools[k].pool->asleep()) {
        index = k;
        pool = w_.pools[k].pool.get();
      }
    }
    const cudaStream_t s = pick_stream(w_.pools[index].device);
    if (!pool->asleep() || in_.below(4) == 0) {
      sleep_pool(index, s);  // asleep already: finishes a release a failed unmap cut short
    } else {
      wake_pool(index, s);
    }
  }

  void disarm() {
    w_.sim.fail_unmap_at(0);
    w_.sim.fail_memcpy_at(0);
    w_.sim.fail_host_register_at(0);
    w_.sim.fail_physical_create_at(0);
    w_.sim.fail_map_at(0);
    w_.sim.fail_set_access_at(0);
  }

  /// Every stream that may have used memory is ordered before `s` (the
  /// caller's duty before a sleep): this actor's, the graphs', and the
  /// implicit streams of both devices.
  void order_everything_before(cudaStream_t s) {
    for (const auto& [t, d] : streams_) wait_for(s, t);
    for (auto& g : graphs_)
      if (!g->capturing) wait_for(s, g->origin);
    wait_for(s, nullptr);
    wait_for(s, cudaStreamPerThread);
    FUZZ_CHECK(w_.sim.set_current_device(1) == cudaSuccess, "set_current_device");
    EventHandle legacy1 = nullptr, per_thread1 = nullptr;
    FUZZ_CHECK(w_.sim.event_create_on(1, &legacy1) == cudaSuccess, "event_create_on");
    FUZZ_CHECK(w_.sim.event_create_on(1, &per_thread1) == cudaSuccess, "event_create_on");
    FUZZ_CHECK(w_.sim.event_record(legacy1, nullptr) == cudaSuccess, "event_record");
    FUZZ_CHECK(w_.sim.event_record(per_thread1, cudaStreamPerThread) == cudaSuccess, "event_record");
    FUZZ_CHECK(w_.sim.set_current_device(0) == cudaSuccess, "set_current_device");
    FUZZ_CHECK(w_.sim.stream_wait_event(s, legacy1) == cudaSuccess, "stream_wait_event");
    FUZZ_CHECK(w_.sim.stream_wait_event(s, per_thread1) == cudaSuccess, "stream_wait_event");
    w_.sim.event_destroy(legacy1);
    w_.sim.event_destroy(per_thread1);
  }

  void sleep_pool(int index, cudaStream_t s) {
    Pool& pool = *w_.pools[index].pool;
    const bool was_asleep = pool.asleep();
    const bool backup = in_.below(4) != 0;
    const bool zeroed = !backup && in_.flag();  // discard_zeroed: wake zeroes the live blocks
    const SleepMode mode = backup ? SleepMode::backup : zeroed ? SleepMode::discard_zeroed : SleepMode::discard;
    switch (in_.below(6)) {  // a failure at one of sleep's driver calls, or none
      case 0: w_.sim.fail_unmap_at(1 + static_cast<int>(in_.below(3))); break;
      case 1: w_.sim.fail_memcpy_at(1 + static_cast<int>(in_.below(3))); break;
      case 2: w_.sim.fail_host_register_at(1); break;
      default: break;
    }
    order_everything_before(s);
    const std::uint64_t used = pool.stats().used_current;
    const std::uint64_t refusals = pool.stats().sleep_budget_refusals;
    const cudaError_t error = pool.sleep(mode, s);
    if (trace_) {
      op_detail_ = std::string(" sleep pool ") + std::to_string(index) +
                   (backup ? " backup: " : zeroed ? " discard_zeroed: " : " discard: ") +
                   cudaGetErrorName(error) + (pool.asleep() ? " (asleep)" : " (awake)");
    }
    disarm();
    bump(g_counts.sleeps);
    const PoolStats after = pool.stats();
    FUZZ_CHECK(after.used_current == used, "sleep changed used bytes");
    const std::size_t budget = w_.pools[index].host_budget;
    FUZZ_CHECK(budget == 0 || after.sleep_host_bytes <= budget, "the pool holds more host memory than its budget");
    if (after.sleep_budget_refusals != refusals) {  // refused before anything was copied or released
      bump(g_counts.budget_refusals);
      FUZZ_CHECK(backup && budget != 0, "a sleep refused for the budget without a backup or a budget");
      FUZZ_CHECK(error == cudaErrorMemoryAllocation && pool.asleep() == was_asleep,
                 "a sleep refused for the budget changed the pool");
    }
    if (error == cudaSuccess) {
      FUZZ_CHECK(pool.asleep(), "a sleep that succeeded left the pool awake");
    } else if (pool.asleep()) {
      bump(g_counts.cut_short_sleeps);
    } else {
      bump(g_counts.failed_sleeps);
      FUZZ_CHECK(!was_asleep, "a failed sleep woke the pool");
      // Awake as it was: every block holds its bytes.
      for (Block& b : mine_) {
        if (b.pool != index) continue;
        check_tag(s, b.p, b.bytes, b.tag);
        b.last = s;
        b.pending = true;
      }
      return;
    }
    if (!was_asleep) {
      w_.pools[index].discarded = !backup;
      w_.pools[index].zeroed = zeroed;
    }
  }

  /// The backup's host memory: reserved ahead (all or nothing, within the
  /// budget) or given back (refused while asleep: the backups are in it).
  void sleep_host_step() {
    op_name_ = "sleep host memory";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    const bool asleep = pool->asleep();
    const PoolStats before = pool->stats();
    const std::size_t budget = w_.pools[index].host_budget;
    if (in_.flag()) {
      const std::size_t bytes = pick_reserve_size(budget);
      if (in_.below(4) == 0) w_.sim.fail_host_register_at(1 + static_cast<int>(in_.below(3)));
      const std::size_t pins = w_.sim.counters().host_register_calls;
      const cudaError_t error = pool->reserve_sleep_backup(bytes);
      disarm();
      if (trace_) op_detail_ = " reserve " + std::to_string(bytes) + ": " + cudaGetErrorName(error);
      const PoolStats after = pool->stats();
      if (error == cudaSuccess) {
        bump(g_counts.host_reserves);
        w_.pools[index].marks.reserved_host_memory();
        FUZZ_CHECK(after.sleep_host_bytes >= bytes, "a reserve that succeeded holds less than asked");
      } else {
        FUZZ_CHECK(error == cudaErrorMemoryAllocation, std::string("reserve_sleep_backup: ") + cudaGetErrorName(error));
        FUZZ_CHECK(asleep || after.sleep_host_bytes >= before.sleep_host_bytes,
                   "a refused reserve gave back host memory");  // all or nothing (pin-ahead may add meanwhile)
      }
      FUZZ_CHECK(budget == 0 || after.sleep_host_bytes <= budget, "a reserve went beyond the budget");
      // Any size beyond the budget is the budget's refusal, counted (64 TiB
      // and SIZE_MAX too); without a budget, 64 TiB or more is refused uncounted.
      const bool beyond_budget = budget != 0 && bytes > budget;
      if (beyond_budget || bytes >= kHugeReserve) {
        bump(g_counts.huge_reserves);
        FUZZ_CHECK(error == cudaErrorMemoryAllocation, "a reserve beyond the budget or of 64 TiB succeeded");
        // Refused before any pin. The count is the simulation's, of every
        // pool: a pin-ahead thread of any pool may pin meanwhile (seen under
        // ThreadSanitizer, another pool's), so it is checked only where none has one.
        const bool any_pin_ahead = std::any_of(std::begin(w_.pools), std::end(w_.pools),
                                               [](const PoolSlot& slot) { return slot.pool && slot.pin_ahead; });
        FUZZ_CHECK(any_pin_ahead || w_.sim.counters().host_register_calls == pins,
                   "a reserve beyond the budget or of 64 TiB tried to pin");
        FUZZ_CHECK(after.sleep_budget_refusals == before.sleep_budget_refusals + (beyond_budget ? 1 : 0),
                   beyond_budget ? "a reserve beyond the budget was not counted as the budget's refusal"
                                 : "a reserve refused without a budget was counted as the budget's");
      }
    } else {
      const cudaError_t error = pool->release_sleep_host_memory();
      if (trace_) op_detail_ = std::string(" release: ") + cudaGetErrorName(error);
      if (asleep) {
        FUZZ_CHECK(error == cudaErrorNotPermitted, "released the backups' host memory of an asleep pool");
        FUZZ_CHECK(pool->stats().sleep_host_bytes == before.sleep_host_bytes, "a refused release changed the host memory");
      } else {
        FUZZ_CHECK(error == cudaSuccess, std::string("release_sleep_host_memory: ") + cudaGetErrorName(error));
        bump(g_counts.host_releases);
        w_.pools[index].marks.released(before);
      }
    }
    FUZZ_CHECK(pool->stats().used_current == before.used_current, "host memory calls changed used bytes");
  }

  /// reserve_sleep_backup's sizes: mostly up to 23 MiB; 1 in 4 one beyond
  /// any host (64 TiB, past it, 2^62, near SIZE_MAX) or just past the budget.
  std::size_t pick_reserve_size(std::size_t budget) {
    if (in_.below(4) != 0) return in_.below(24) * kMiB + in_.below(4) * 4096;
    const std::size_t sizes[] = {kHugeReserve, kHugeReserve + 1, std::size_t{1} << 62, SIZE_MAX - in_.below(4096),
                                 budget + 1 + in_.below(4) * kMiB};
    return sizes[in_.below(5)];
  }

  void wake_pool(int index, cudaStream_t s) {
    Pool& pool = *w_.pools[index].pool;
    switch (in_.below(10)) {  // a failure at one of wake's driver calls, or none
      case 0: w_.sim.fail_physical_create_at(1 + static_cast<int>(in_.below(3)), cudaErrorMemoryAllocation); break;
      case 1: w_.sim.fail_map_at(1 + static_cast<int>(in_.below(3))); break;
      case 2: w_.sim.fail_set_access_at(1 + static_cast<int>(in_.below(2))); break;
      default: break;
    }
    if (in_.flag()) w_.sim.delay_copies(std::chrono::microseconds(200));  // the restore runs late
    const std::uint64_t used = pool.stats().used_current;
    const cudaError_t error = pool.wake(s);
    if (trace_) op_detail_ = std::string(" wake pool ") + std::to_string(index) + ": " + cudaGetErrorName(error);
    w_.sim.delay_copies(std::chrono::microseconds(0));
    disarm();
    bump(g_counts.wakes);
    FUZZ_CHECK(pool.stats().used_current == used, "wake changed used bytes");
    if (error != cudaSuccess) {
      bump(g_counts.failed_wakes);
      FUZZ_CHECK(pool.asleep(), "a failed wake left the pool awake");
      return;
    }
    FUZZ_CHECK(!pool.asleep(), "a wake that succeeded left the pool asleep");
    after_wake(index, s);
  }

  /// After a wake of pool `index` on `s` succeeded: the blocks kept hold
  /// their tags on `s` (backup), zeros (discard_zeroed), or are written anew.
  void after_wake(int index, cudaStream_t s) {
    const bool discarded = w_.pools[index].discarded;
    const bool zeroed = w_.pools[index].zeroed;
    // Work on `s` after wake sees the contents: kept blocks hold their tags
    // (after a backup), zeros (discard_zeroed), or are written anew (after a discard).
    for (Block& b : mine_) {
      if (b.pool != index) continue;
      if (zeroed) {
        check_tag(s, b.p, b.bytes, 0);
        bump(g_counts.blocks_zeroed);
      }
      if (discarded) {
        b.tag = new_tag();
        write_tag(s, b.p, b.bytes, b.tag);
      } else {
        check_tag(s, b.p, b.bytes, b.tag);
        bump(g_counts.blocks_restored);
      }
      b.last = s;
      b.pending = true;
    }
    for (auto& g : graphs_) {
      if (!g->tried(index)) continue;
      if (g->has_last_use) wait_for(s, g->last_use);
      for (GraphBlock& b : g->blocks) {
        if (b.pool != index || b.freed_in_graph || b.caller_freed || !b.tag_known) continue;
        if (discarded) {
          b.tag_known = false;
        } else {
          check_tag(s, b.p, b.bytes, b.tag);
          bump(g_counts.blocks_restored);
        }
      }
      // Its launches, a capture's open now included, come after the restore.
      g->last_use = s;
      g->has_last_use = true;
    }
  }

  // ---- the marks' operations (one thread; mark_model.hpp) ----------------------
  /// A created stream of `device` of this actor's (made if it has none): one
  /// that names the same stream on any host thread (not the per-thread one,
  /// nor the legacy stream of a device the other thread is not current on).
  cudaStream_t created_stream(int device) {
    std::vector<cudaStream_t> choices;
    for (const auto& [t, d] : streams_)
      if (d == device) choices.push_back(t);
    if (!choices.empty()) return choices[in_.below(choices.size())];
    streams_.emplace_back(w_.sim.create_stream(false, device), device);
    return streams_.back().first;
  }

  /// A wake while another host thread frees blocks of the waking pool, each
  /// on a stream ordered after its last use: every such free is ordered after
  /// the restore (docs/sleep-wake.md, "Frees while the restore runs"). Each
  /// freeing stream then allocates the size again and writes its tag; once
  /// the wake's stream is synchronized, that block must hold what its own
  /// stream wrote, never the backup's bytes or the zeroing's.
  void wake_with_frees() {
    op_name_ = "wake with frees on another thread";
    int index = 0;
    if (pick_pool(&index) == nullptr) return;
    Pool& pool = *w_.pools[index].pool;
    const int device = w_.pools[index].device;
    const cudaStream_t s = pick_stream(device);
    if (!pool.asleep()) sleep_pool(index, s);
    if (!pool.asleep()) return;
    struct Freed {
      Block block;
      cudaStream_t on;
    };
    std::vector<Freed> frees;
    for (std::size_t k = 1 + in_.below(3); k > 0; --k) {
      std::vector<std::size_t> of_pool;
      for (std::size_t i = 0; i < mine_.size(); ++i)
        if (mine_[i].pool == index) of_pool.push_back(i);
      if (of_pool.empty()) break;
      const std::size_t i = of_pool[in_.below(of_pool.size())];
      const Block b = mine_[i];
      mine_[i] = mine_.back();
      mine_.pop_back();
      const cudaStream_t t = created_stream(device);
      order_after(b, t);
      w_.drop_live(b.p);
      frees.push_back(Freed{b, t});
    }
    if (in_.flag()) w_.sim.delay_copies(std::chrono::microseconds(200));  // the restore runs late
    // 1 in 2, the frees start at wake's first map — after it chose the blocks
    // to restore, before it enqueued their copies — the map waiting a little
    // for them (not for their end: such a free may wait for the wake);
    // otherwise whenever the second thread runs.
    auto go = std::make_shared<std::atomic<bool>>(!in_.flag());
    if (!go->load()) {
      w_.sim.before_next_map([go] {
        go->store(true);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      });
    }
    std::atomic<int> refused{0};
    std::thread freer([&pool, &frees, &refused, go] {
      while (!go->load()) std::this_thread::yield();
      for (const Freed& f : frees)
        if (pool.try_deallocate(f.block.p, f.on) != cudaSuccess) refused.fetch_add(1);
    });
    const cudaError_t error = pool.wake(s);
    go->store(true);             // a wake that mapped nothing: the frees come after it
    w_.sim.before_next_map({});  // and its hook goes
    freer.join();
    if (trace_) op_detail_ = " of pool " + std::to_string(index) + ": " + cudaGetErrorName(error);
    w_.sim.delay_copies(std::chrono::microseconds(0));
    w_.pools[index].marks.inexact_used();  // another thread called the pool
    bump(g_counts.wakes);
    g_counts.frees_during_wake.fetch_add(static_cast<long>(frees.size()), std::memory_order_relaxed);
    FUZZ_CHECK(refused.load() == 0, "a free made while the pool woke was refused");
    if (error != cudaSuccess) {
      bump(g_counts.failed_wakes);
      FUZZ_CHECK(pool.asleep(), "a failed wake left the pool awake");
      return;
    }
    FUZZ_CHECK(!pool.asleep(), "a wake that succeeded left the pool asleep");
    after_wake(index, s);
    std::vector<const unsigned char*> again;
    for (const Freed& f : frees) {
      if (allocate_block(index, f.on, f.block.bytes)) again.push_back(mine_.back().p);
    }
    FUZZ_CHECK(w_.sim.stream_synchronize(s) == cudaSuccess, "stream_synchronize");  // the restore is done
    for (const Block& b : mine_) {
      if (std::find(again.begin(), again.end(), b.p) == again.end()) continue;
      check_tag(b.last, b.p, b.bytes, b.tag);  // after its own stream's write, and after the restore
      bump(g_counts.reallocated_after_wake);
    }
  }

  /// A growth that fails midway (the device refuses its second chunk, so the
  /// first is undone: reservedHigh counts it, no block ever lived in it), then
  /// release_sleep_host_memory, then a growth below what the pool once
  /// backed: pin-ahead must hold, pinning nothing (mark_model.hpp).
  void failed_growth_then_release() {
    op_name_ = "failed growth, release, growth";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr || pool->asleep()) return;
    const cudaStream_t s = pick_stream(w_.pools[index].device);
    w_.sim.fail_physical_create_at(2);
    (void)allocate_block(index, s, (4 + in_.below(37)) * kMiB);  // two chunks of 3 MiB or of 32 MiB, or more
    disarm();  // a growth of one chunk left it armed
    const PoolStats before = pool->stats();
    const cudaError_t error = pool->release_sleep_host_memory();
    FUZZ_CHECK(error == cudaSuccess, std::string("release_sleep_host_memory: ") + cudaGetErrorName(error));
    bump(g_counts.failed_growth_releases);
    w_.pools[index].marks.released(before);
    (void)allocate_block(index, s, (1 + in_.below(12)) * kMiB);
    if (w_.pools[index].pin_ahead && in_.below(8) == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the thread looks again meanwhile
    }
  }

  /// A pool that saw a second stream once: a block allocated and freed on
  /// another stream, then a round of one to three blocks on one stream (to
  /// warm its cache), UsedMemHigh reset, and the same round again, on the
  /// fast path: the mark is what was used at the reset plus the round's
  /// blocks (mark_model.hpp).
  void streams_once() {
    op_name_ = "several streams once";
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr || pool->asleep()) return;
    const int device = w_.pools[index].device;
    const cudaStream_t other = created_stream(device);
    if (allocate_block(index, other, 1 + in_.below(256) * 4096)) free_block(mine_.size() - 1, other);
    const cudaStream_t s = pick_stream(device);
    std::vector<std::size_t> sizes(1 + in_.below(3));
    for (std::size_t& bytes : sizes) bytes = 1 + in_.below(3 * 256) * 4096;
    (void)quiet_round(index, s, sizes);
    const std::uint64_t zero = 0;
    FUZZ_CHECK(pool->set_attribute(cudaMemPoolAttrUsedMemHigh, &zero) == cudaSuccess, "resetting UsedMemHigh");
    w_.pools[index].marks.used_reset(pool->stats());
    (void)quiet_round(index, s, sizes);
    bump(g_counts.stream_rounds);
  }

  /// Allocates blocks of `sizes` from pool `index` on `s`, then frees them
  /// on `s`, reading no statistics meanwhile (a read samples the used bytes:
  /// the mark must come from the pool's own count); then tells the marks'
  /// model the round's peak. Returns the bytes the round held at once.
  std::uint64_t quiet_round(int index, cudaStream_t s, const std::vector<std::size_t>& sizes) {
    Pool& pool = *w_.pools[index].pool;
    const std::uint64_t used_before = pool.stats().used_current;
    std::vector<Block> round;
    for (const std::size_t bytes : sizes) {
      void* out = nullptr;
      const cudaError_t error = pool.try_allocate(&out, bytes, s);
      may_synchronize(index);
      if (error != cudaSuccess) {  // out of memory, or an injected failure: nothing handed out
        bump(g_counts.failed_allocations);
        FUZZ_CHECK(out == nullptr, "a failed allocation left a pointer");
        continue;
      }
      auto* p = static_cast<unsigned char*>(out);
      FUZZ_CHECK(p != nullptr && pool.block_size(p) == bytes, "a round's block");
      w_.add_live(p, bytes);
      round.push_back(Block{index, p, bytes, new_tag(), s, true});
      write_tag(s, p, bytes, round.back().tag);
      bump(g_counts.allocations);
    }
    std::uint64_t held = 0;
    for (const Block& b : round) {
      check_tag(s, b.p, b.bytes, b.tag);
      w_.drop_live(b.p);
      FUZZ_CHECK(pool.try_deallocate(b.p, s) == cudaSuccess, "freeing a round's block");
      bump(g_counts.frees);
      held += b.bytes;
    }
    MarkModel& marks = w_.pools[index].marks;
    marks.saw_used(used_before + held);
    marks.allocated(pool.stats(), true);  // ReservedMemHigh now bounds what the round's growths reserved
    return held;
  }

  /// Every pool's marks against the model (one thread), after each operation.
  void observe_marks() {
    for (PoolSlot& slot : w_.pools)
      if (slot.pool) slot.marks.observe(slot.pool->stats());
  }

  void check_pools() {
    for (PoolSlot& slot : w_.pools) {
      if (!slot.pool) continue;
      try {
        slot.pool->check_invariants();
      } catch (const Error& e) {
        FUZZ_CHECK(false, e.what());
      }
    }
  }

  /// Frees everything this actor holds (and, single-threaded, what was handed off).
  void finish() {
    op_name_ = "finish";
    finish_graphs();
    while (!mine_.empty()) {
      const Block& b = mine_.back();
      free_block(mine_.size() - 1, b.pending ? b.last : any_stream(w_.pools[b.pool].device));
    }
    for (const auto& [s, d] : streams_) {
      w_.sim.stream_synchronize(s);
      w_.sim.destroy_stream(s);
    }
    streams_.clear();
  }

  World& w_;
  ByteReader in_;
  int id_;
  std::vector<Block> mine_;
  std::vector<Block> freed_;                           ///< recently freed (double-free attempts)
  std::vector<std::pair<cudaStream_t, int>> streams_;  ///< created: (handle, device)
  unsigned next_tag_ = 0;
  std::vector<std::unique_ptr<GraphRecord>> graphs_;  ///< captures and graphs (one thread)
  int next_graph_id_ = 0;
  ForeignCapture foreign_;
  const char* op_name_ = "start";
  std::string op_detail_;  ///< with SOVA_FUZZ_TRACE: what the operation did
  bool trace_ = false;
  std::size_t syncs_at_op_ = 0;  ///< the simulation's device synchronizes before the current operation  ///<
                                 ///< SOVA_FUZZ_TRACE set: each operation's name on stderr
};

/// After every actor is done: what was left handed off is freed, every pool
/// must be empty and intact, no tag may have been overwritten, and the
/// simulation must hold no physical memory once the pools are gone.
void finish_world(World& w) {
  const cudaStream_t device1 = w.sim.create_stream(false, 1);  // the givers' streams may be gone
  while (!w.handoffs.empty()) {
    Handoff h = w.handoffs.front();
    w.handoffs.pop_front();
    if (h.ready != nullptr) {
      FUZZ_CHECK(w.sim.event_synchronize(h.ready) == cudaSuccess, "event_synchronize");
      w.sim.event_destroy(h.ready);
    }
    w.drop_live(h.block.p);
    const cudaStream_t t = w.pools[h.block.pool].device == 0 ? nullptr : device1;
    FUZZ_CHECK(w.pools[h.block.pool].pool->try_deallocate(h.block.p, t) == cudaSuccess, "freeing a handed-off block");
  }
  FUZZ_CHECK(w.sim.device_synchronize(0) == cudaSuccess && w.sim.device_synchronize(1) == cudaSuccess,
             "device_synchronize");
  w.sim.destroy_stream(device1);
  FUZZ_CHECK(w.tags.mismatches.load() == 0, "a block's tag was overwritten while it was live (premature reuse)");
  FUZZ_CHECK(w.live.empty(), "the model still holds live blocks");
  for (PoolSlot& slot : w.pools) {
    if (!slot.pool) continue;
    slot.pool->check_invariants();
    const PoolStats s = slot.pool->stats();
    FUZZ_CHECK(s.used_current == 0 && s.live_blocks == 0, "a pool counts blocks nobody holds");
    slot.pool.reset();
  }
  const SimCounters c = w.sim.counters();
  FUZZ_CHECK(c.physical_bytes == 0, "physical memory leaked past the pools' destruction");
  FUZZ_CHECK(c.reservations == 0, "VA leaked past the pools' destruction");
  FUZZ_CHECK(c.pinned_host_bytes == 0, "pinned host memory (sleep backups) leaked past the pools' destruction");
  FUZZ_CHECK(c.host_mapped_bytes == 0, "host memory mapped for sleep backups leaked past the pools' destruction");
  FUZZ_CHECK(w.sim.faults() == 0, "a device fault: " + w.sim.first_fault());
}

/// Runs `body`, turning the pool's own exceptions into failures.
template <class Body>
void guarded(Body body) {
  try {
    body();
  } catch (const Failure&) {
    throw;
  } catch (const std::exception& e) {
    throw Failure(std::string("unexpected exception: ") + e.what());
  }
}

}  // namespace

Counts counts() {
  Counts c;
  c.operations = g_counts.operations.load();
  c.allocations = g_counts.allocations.load();
  c.failed_allocations = g_counts.failed_allocations.load();
  c.frees = g_counts.frees.load();
  c.refused_frees = g_counts.refused_frees.load();
  c.pools_made = g_counts.pools_made.load();
  c.pools_refused = g_counts.pools_refused.load();
  c.streams_destroyed = g_counts.streams_destroyed.load();
  c.handoffs = g_counts.handoffs.load();
#define FUZZ_COPY(name) c.name = g_counts.name.load()
  FUZZ_COPY(captures);
  FUZZ_COPY(captures_ended);
  FUZZ_COPY(captures_invalidated);
  FUZZ_COPY(graph_allocations);
  FUZZ_COPY(graph_failed_allocations);
  FUZZ_COPY(graph_frees);
  FUZZ_COPY(capture_frees_refused);
  FUZZ_COPY(graph_launches);
  FUZZ_COPY(graphs_released);
  FUZZ_COPY(output_frees);
  FUZZ_COPY(memory_back_checks);
  FUZZ_COPY(foreign_captures);
  FUZZ_COPY(foreign_ended);
  FUZZ_COPY(foreign_invalidated);
  FUZZ_COPY(foreign_invalidated_unexplained);
  FUZZ_COPY(sleeps);
  FUZZ_COPY(failed_sleeps);
  FUZZ_COPY(cut_short_sleeps);
  FUZZ_COPY(wakes);
  FUZZ_COPY(failed_wakes);
  FUZZ_COPY(frees_asleep);
  FUZZ_COPY(allocations_asleep);
  FUZZ_COPY(trims_asleep);
  FUZZ_COPY(blocks_restored);
  FUZZ_COPY(blocks_zeroed);
  FUZZ_COPY(budget_refusals);
  FUZZ_COPY(host_reserves);
  FUZZ_COPY(host_releases);
  FUZZ_COPY(frees_during_wake);
  FUZZ_COPY(reallocated_after_wake);
  FUZZ_COPY(failed_growth_releases);
  FUZZ_COPY(huge_reserves);
  FUZZ_COPY(stream_rounds);
#undef FUZZ_COPY
  return c;
}

void run_program(const std::uint8_t* data, std::size_t size, const Options& options) {
  guarded([&] {
    ByteReader in(data, size);
    World world(in, /*threaded=*/false, options);
    Actor actor(world, in, 0);
    actor.run(4096);
    finish_world(world);
  });
}

void run_program_threaded(const std::uint8_t* data, std::size_t size, int threads, const Options& options) {
  guarded([&] {
    ByteReader header(data, size < 16 ? size : 16);
    World world(header, /*threaded=*/true, options);
    const std::size_t body = size > 16 ? size - 16 : 0;
    const std::size_t slice = threads > 0 ? body / static_cast<std::size_t>(threads) : 0;
    std::vector<std::thread> workers;
    std::mutex failure_mutex;
    std::string failure;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        try {
          Actor actor(world, ByteReader(data + 16 + static_cast<std::size_t>(t) * slice, slice), t);
          actor.run(4096);
        } catch (const std::exception& e) {
          std::lock_guard lock(failure_mutex);
          if (failure.empty()) failure = "thread " + std::to_string(t) + ": " + e.what();
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    if (!failure.empty()) throw Failure(failure);
    finish_world(world);
  });
}

}  // namespace sova::fuzz
