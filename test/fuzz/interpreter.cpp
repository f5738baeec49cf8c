// The pool-operation interpreter (interpreter.hpp). A World holds the
// simulation, the pools and what every thread may see (the live blocks'
// ranges, blocks handed between threads); an Actor is one host thread's
// program: its streams, its blocks, and the operations it reads from its
// bytes. docs/fuzzing.md lists the operations and the checks.
#include "fuzz/interpreter.hpp"

#include "fuzz/byte_reader.hpp"
#include "fuzz/garbage_policy.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
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

#define FUZZ_CHECK(cond, what) \
  do { \
    if (!(cond)) throw Failure(std::string(what) + " (" #cond ", line " + std::to_string(__LINE__) + ")"); \
  } while (0)

struct AtomicCounts {
  std::atomic<long> operations{0}, allocations{0}, failed_allocations{0}, frees{0}, refused_frees{0}, pools_made{0},
      pools_refused{0}, streams_destroyed{0}, handoffs{0};
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
  World(ByteReader& in, bool threaded)
      : threaded(threaded), config(config_from(in)), sim(config), granularity(config.granularity) {
    const int pools = 1 + static_cast<int>(in.below(kMaxPools));
    for (int i = 0; i < pools; ++i) create_pool(i, in);
  }

  static SimConfig config_from(ByteReader& in) {
    SimConfig config;
    config.device_count = 2;
    config.total_memory = std::size_t{64} << 20;
    config.granularity = (in.byte() & 1) != 0 ? std::size_t{64} << 10 : std::size_t{2} << 20;
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
    const std::size_t reservations = sim.counters().reservations;
    try {
      pools[slot].pool = std::make_unique<Pool>(o);
      pools[slot].device = o.device;
      bump(g_counts.pools_made);
    } catch (const Error&) {
      bump(g_counts.pools_refused);
      FUZZ_CHECK(sim.counters().reservations == reservations, "a refused pool left its VA reserved");
    }
  }

  const bool threaded;
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

  /// Records a new live block, checking it overlaps none.
  void add_live(const unsigned char* p, std::size_t bytes) {
    std::lock_guard lock(mu);
    const auto a = reinterpret_cast<std::uintptr_t>(p);
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
  Actor(World& world, ByteReader in, int id) : w_(world), in_(in), id_(id) {}

  void run(std::size_t max_ops) {
    for (std::size_t op = 0; op < max_ops && !in_.done(); ++op) {
      {
        std::shared_lock quiet(w_.checking);
        step();
      }
      if (!w_.threaded || op % 16 == 0) {
        // With threads, the check waits for the others' operations in flight:
        // check_invariants does not lock stream states created during its walk
        // (test/core/test_check_invariants_new_streams.cpp, [.lead-todo]).
        std::unique_lock alone(w_.checking);
        check_pools();
      }
    }
    std::shared_lock quiet(w_.checking);
    finish();
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
        w_.sim.delay(pick_stream(static_cast<int>(in_.below(2))), std::chrono::microseconds(in_.below(200)));
        break;
      case 16: handoff(); break;
      case 17: pool_lifecycle(); break;
      case 18: free_across_devices(); break;
      default: allocate(); break;
    }
  }

  void allocate() {
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    const cudaStream_t s = pick_stream(w_.pools[index].device);
    const std::size_t bytes = pick_size();
    const PoolStats before = w_.threaded ? PoolStats{} : pool->stats();
    void* out = reinterpret_cast<void*>(0x1);
    const cudaError_t error = pool->try_allocate(&out, bytes, s);
    auto* p = static_cast<unsigned char*>(out);
    if (error == cudaSuccess) {
      if (bytes == 0) {
        FUZZ_CHECK(p == nullptr, "size 0 did not give NULL");
        return;
      }
      FUZZ_CHECK(p != nullptr, "success without a block");
      FUZZ_CHECK(reinterpret_cast<std::uintptr_t>(p) % 512 == 0, "a block not 512-aligned");
      FUZZ_CHECK(pool->contains(p) && pool->contains(p + bytes - 1), "a block outside its pool");
      FUZZ_CHECK(pool->block_size(p) == bytes, "block_size disagrees with the request");
      w_.add_live(p, bytes);
      const unsigned char tag = static_cast<unsigned char>(1 + (next_tag_++ % 250));
      w_.sim.launch(s, [p, bytes, tag] { Tags::write(p, bytes, tag); });
      mine_.push_back(Block{index, p, bytes, tag, s, true});
      bump(g_counts.allocations);
      return;
    }
    bump(g_counts.failed_allocations);
    FUZZ_CHECK(p == nullptr, "a failed allocation left a pointer");
    FUZZ_CHECK(error == cudaErrorMemoryAllocation || error == cudaErrorInvalidValue || error == cudaErrorUnknown,
               std::string("an unexpected error: ") + cudaGetErrorName(error));
    if (!w_.threaded) {
      const PoolStats after = pool->stats();
      FUZZ_CHECK(after.used_current == before.used_current && after.live_blocks == before.live_blocks &&
                     after.allocations == before.allocations,
                 "a failed allocation changed the pool");
    }
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
    const auto* p = b.p;
    const std::size_t bytes = b.bytes;
    const unsigned char tag = b.tag;
    Tags* tags = &w_.tags;
    w_.sim.launch(t, [p, bytes, tag, tags] {
      if (!Tags::holds(p, bytes, tag)) tags->mismatches.fetch_add(1);
    });
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
      case 0: w_.pools[index].pool->trim_to(in_.flag() ? 0 : w_.granularity); break;
      case 1:
        if (!w_.threaded) {
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
    w_.sim.destroy_stream(s);
    bump(g_counts.streams_destroyed);
    streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void trim() {
    int index = 0;
    Pool* pool = pick_pool(&index);
    if (pool == nullptr) return;
    const std::size_t keeps[] = {0, w_.granularity, 5 * kMiB, SIZE_MAX};
    const std::uint64_t used = w_.threaded ? 0 : pool->stats().used_current;
    try {
      pool->trim_to(keeps[in_.below(4)]);
    } catch (const Error& e) {
      FUZZ_CHECK(false, std::string("trim_to threw: ") + e.what());
    }
    if (!w_.threaded) FUZZ_CHECK(pool->stats().used_current == used, "trim_to changed used bytes");
  }

  void attribute() {
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
      const cudaError_t error = pool->set_attribute(attr, int_valued ? static_cast<void*>(&value32) : &value64);
      const bool settable = raw >= 1 && raw <= 4;
      const bool resettable =
          (raw == cudaMemPoolAttrReservedMemHigh || raw == cudaMemPoolAttrUsedMemHigh) && value64 == 0;
      FUZZ_CHECK(error == (settable || resettable ? cudaSuccess : cudaErrorInvalidValue), "set_attribute's answer");
      return;
    }
    std::uint64_t value = 0;
    const cudaError_t error = pool->get_attribute(attr, &value);
    FUZZ_CHECK(error == (known ? cudaSuccess : cudaErrorInvalidValue), "get_attribute's answer");
    if (!w_.threaded && raw == cudaMemPoolAttrUsedMemCurrent) {
      std::uint64_t model = 0;
      for (const Block& b : mine_)
        if (b.pool == index) model += b.bytes;
      FUZZ_CHECK(value == model, "UsedMemCurrent differs from the live blocks' bytes");
    }
  }

  void access() {
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
        FUZZ_CHECK(w_.sim.device_synchronize(0) == cudaSuccess && w_.sim.device_synchronize(1) == cudaSuccess,
                   "device_synchronize");
        for (Block& b : mine_) {
          b.pending = false;
          FUZZ_CHECK(Tags::holds(b.p, b.bytes, b.tag), "a live block lost its tag");
        }
        return;
      }
    }
  }

  void handoff() {
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
    const int index = static_cast<int>(in_.below(kMaxPools));
    if (w_.pools[index].pool) {
      for (std::size_t i = mine_.size(); i-- > 0;) {
        if (mine_[i].pool == index) free_block(i, pick_stream(w_.pools[index].device));
      }
      std::erase_if(freed_, [&](const Block& b) { return b.pool == index; });
      w_.pools[index].pool->check_invariants();
      w_.pools[index].pool.reset();
    }
    w_.create_pool(index, in_);
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
  return c;
}

void run_program(const std::uint8_t* data, std::size_t size) {
  guarded([&] {
    ByteReader in(data, size);
    World world(in, /*threaded=*/false);
    Actor actor(world, in, 0);
    actor.run(4096);
    finish_world(world);
  });
}

void run_program_threaded(const std::uint8_t* data, std::size_t size, int threads) {
  guarded([&] {
    ByteReader header(data, size < 16 ? size : 16);
    World world(header, /*threaded=*/true);
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
