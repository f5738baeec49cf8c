// The stress workload (stress_run.hpp says what it checks; docs/stress.md how
// to run it).
//
// The user's side of the contract is kept exactly, so that every mismatch is
// the pool's fault: a block used on stream A is freed on stream B only after
// B is ordered after A's use — by an event (record on A, wait on B) or by
// synchronizing A from the host — and a block handed to another thread
// travels with that ordering (the event, or the fact that A was synchronized).
#include "stress/stress_run.hpp"

#include <sova/pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sova::stress {

namespace {

using Clock = std::chrono::steady_clock;
using sova::test::TestDevice;

// ---- determinism: our own generator, so a seed means the same on every platform

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t stream) : state_(mix64(seed) ^ mix64(stream + 0x51ed27u)) {}
  std::uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ull); }
  /// Uniform in [0, n); n > 0.
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  /// True with probability percent / 100.
  bool chance(unsigned percent) { return below(100) < percent; }
  double unit() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

 private:
  std::uint64_t state_;
};

// ---- what a thread holds

struct LiveBlock {
  void* ptr;
  std::size_t bytes;
  std::uint32_t tag;
  int stream;  ///< index of the owning thread's stream the block was last used on
};

/// A block on its way to another thread. `event` (recorded on the stream that
/// last used it) orders the receiver's stream; nullptr: the sender
/// synchronized that stream before handing the block over.
struct Handoff {
  void* ptr;
  std::size_t bytes;
  std::uint32_t tag;
  EventHandle event;
};

struct Inbox {
  std::mutex mutex;
  std::vector<Handoff> items;
};

struct Counters {
  std::uint64_t ops = 0;
  std::uint64_t allocations = 0;
  std::uint64_t bytes_allocated = 0;
  std::uint64_t frees = 0;  ///< deallocate calls that succeeded
  std::uint64_t frees_same_stream = 0;
  std::uint64_t frees_other_stream = 0;  ///< freed on another of the thread's streams
  std::uint64_t handoffs_sent = 0;
  std::uint64_t handoffs_received = 0;
  std::uint64_t adopted = 0;  ///< received blocks kept and used further
  std::uint64_t retags = 0;
  std::uint64_t migrations = 0;  ///< live blocks moved to another stream
  std::uint64_t busy = 0;
  std::uint64_t host_syncs = 0;    ///< stream synchronizes done by the workload
  std::uint64_t event_orders = 0;  ///< event record + stream wait done by the workload
  std::uint64_t out_of_memory = 0;
  std::uint64_t probes = 0;

  void add(const Counters& o) {
    ops += o.ops;
    allocations += o.allocations;
    bytes_allocated += o.bytes_allocated;
    frees += o.frees;
    frees_same_stream += o.frees_same_stream;
    frees_other_stream += o.frees_other_stream;
    handoffs_sent += o.handoffs_sent;
    handoffs_received += o.handoffs_received;
    adopted += o.adopted;
    retags += o.retags;
    migrations += o.migrations;
    busy += o.busy;
    host_syncs += o.host_syncs;
    event_orders += o.event_orders;
    out_of_memory += o.out_of_memory;
    probes += o.probes;
  }
};

/// What the watchdog shows about a thread.
struct Progress {
  std::atomic<std::uint64_t> ops{0};
  std::atomic<const char*> action{"starting"};
};

struct Shared {
  const Options& options;
  TestDevice& device;
  Driver& driver;
  Pool& pool;
  std::vector<std::vector<cudaStream_t>> streams;  // [thread][i], made before the threads start
  std::vector<std::unique_ptr<Inbox>> inboxes;
  std::vector<std::unique_ptr<Progress>> progress;
  Clock::time_point start;
  std::atomic<bool> stop{false};
  std::atomic<bool> timed_out{false};

  std::mutex failure_mutex;
  std::vector<std::string> failures;

  Shared(const Options& o, TestDevice& d, Pool& p) : options(o), device(d), driver(d.driver()), pool(p) {}

  void fail(std::string message) {
    stop.store(true);
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (failures.size() < 32) failures.push_back(std::move(message));
  }
  std::size_t failure_count() {
    std::lock_guard<std::mutex> lock(failure_mutex);
    return failures.size();
  }
};

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char line[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(line, sizeof line, fmt, args);
  va_end(args);
  return line;
}

double mib(std::uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

// ---- one thread's workload

class Worker {
 public:
  Worker(Shared& shared, int index)
      : s_(shared),
        o_(shared.options),
        index_(index),
        rng_(shared.options.seed, static_cast<std::uint64_t>(index)),
        streams_(shared.streams[static_cast<std::size_t>(index)]),
        progress_(*shared.progress[static_cast<std::size_t>(index)]) {}

  void run() {
    try {
      body();
    } catch (const std::exception& e) {
      s_.fail(format("thread %d, op %" PRIu64 ": %s", index_, c_.ops, e.what()));
    }
    // Whatever happened, give every block back, checked.
    try {
      progress_.action.store("final frees");
      receive(true);
      for (const LiveBlock& b : live_) {
        s_.device.expect(b.ptr, b.bytes, b.tag, streams_[static_cast<std::size_t>(b.stream)]);
        deallocate(b.ptr, b.stream);
        ++c_.frees_same_stream;
      }
      live_.clear();
    } catch (const std::exception& e) {
      s_.fail(format("thread %d, final frees: %s", index_, e.what()));
    }
    progress_.action.store("done");
  }

  const Counters& counters() const { return c_; }

 private:
  void body() {
    const auto deadline =
        o_.time_limit_s > 0
            ? s_.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.time_limit_s))
            : Clock::time_point::max();
    for (std::uint64_t op = 0; op < o_.ops; ++op) {
      if (s_.stop.load(std::memory_order_relaxed)) return;
      if ((op & 63) == 0 && Clock::now() >= deadline) {
        s_.timed_out.store(true);
        s_.stop.store(true);
        return;
      }
      if (index_ == 0 && o_.check_every != 0 && op % o_.check_every == o_.check_every - 1) checkpoint(op + 1);
      step();
      ++c_.ops;
      progress_.ops.store(c_.ops, std::memory_order_relaxed);
    }
  }

  void step() {
    const std::uint64_t r = rng_.below(1000);
    const bool full = live_.size() >= o_.max_live;
    if (live_.empty() || (r < 400 && !full)) return allocate();
    if (r < 580) return free_same_stream();
    if (r < 680) return free_other_stream();
    if (r < 750) return hand_off();
    if (r < 830) return receive(false);
    if (r < 900) return retag();
    if (r < 930) return busy();
    if (r < 950) return host_sync();
    if (r < 960) return free_many();
    if (r < 970) return probe();
    return full ? free_same_stream() : allocate();
  }

  std::size_t pick_size() {
    static constexpr std::size_t kPopular[] = {256,
                                               512,
                                               768,
                                               1024,
                                               4096,
                                               8192,
                                               65536,
                                               131072,
                                               std::size_t{1} << 20,
                                               std::size_t{2} << 20,
                                               std::size_t{4} << 20};
    std::size_t size;
    if (rng_.chance(40)) {
      // Sizes that repeat, so the per-stream caches (the fast path) get hits.
      size = kPopular[rng_.below(std::size(kPopular))];
    } else {
      // Skewed small: log-uniform within a class picked with falling odds.
      const std::uint64_t c = rng_.below(100);
      double lo, hi;
      if (c < 60) {
        lo = 256, hi = 4096;
      } else if (c < 85) {
        lo = 4096, hi = 256 << 10;
      } else if (c < 97) {
        lo = 256 << 10, hi = 2 << 20;
      } else {
        lo = 2 << 20, hi = static_cast<double>(o_.max_block);
      }
      if (hi < lo) hi = lo;
      size = static_cast<std::size_t>(std::exp(std::log(lo) + rng_.unit() * (std::log(hi) - std::log(lo))));
    }
    return std::clamp(size, o_.min_block, o_.max_block);
  }

  std::uint32_t new_tag() {
    const std::uint64_t h = mix64(o_.seed * 0x100000001b3ull ^ (static_cast<std::uint64_t>(index_) << 40) ^ ++tags_);
    const auto tag = static_cast<std::uint32_t>(h ^ (h >> 32));
    return tag == 0 ? 1u : tag;  // fresh memory reads 0: never a valid tag
  }

  int other_stream(int a) {
    const int n = static_cast<int>(streams_.size());
    if (n == 1) return a;
    return (a + 1 + static_cast<int>(rng_.below(static_cast<std::uint64_t>(n - 1)))) % n;
  }

  cudaStream_t stream(int i) const { return streams_[static_cast<std::size_t>(i)]; }

  void check_driver(cudaError_t error, const char* what) {
    if (error != cudaSuccess) {
      throw std::runtime_error(format("%s failed: %s", what, cudaGetErrorName(error)));
    }
  }

  /// Orders later work on stream `b` after everything submitted to `a` so far.
  void order(int a, int b) {
    if (a == b) return;
    if (rng_.chance(50)) {
      EventHandle event = nullptr;
      check_driver(s_.driver.event_create(&event), "event_create");
      check_driver(s_.driver.event_record(event, stream(a)), "event_record");
      check_driver(s_.driver.stream_wait_event(stream(b), event), "stream_wait_event");
      check_driver(s_.driver.event_destroy(event), "event_destroy");
      ++c_.event_orders;
    } else {
      s_.device.synchronize(stream(a));
      ++c_.host_syncs;
    }
  }

  void deallocate(void* ptr, int on) {
    s_.pool.deallocate(ptr, stream(on));  // throws sova::Error on misuse: a failure here
    ++c_.frees;
  }

  LiveBlock take(std::size_t i) {
    LiveBlock b = live_[i];
    live_[i] = live_.back();
    live_.pop_back();
    return b;
  }

  std::size_t pick_live() { return static_cast<std::size_t>(rng_.below(live_.size())); }

  void allocate() {
    progress_.action.store("allocate");
    const std::size_t bytes = pick_size();
    const int on = static_cast<int>(rng_.below(streams_.size()));
    void* ptr = nullptr;
    try {
      ptr = s_.pool.allocate(bytes, stream(on));
    } catch (const OutOfMemory& e) {
      ++c_.out_of_memory;
      if (o_.pool_limit == 0) throw std::runtime_error(format("out of memory with no pool limit: %s", e.what()));
      return;
    }
    ++c_.allocations;
    c_.bytes_allocated += bytes;
    if (ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % 256 != 0 || !s_.pool.contains(ptr)) {
      throw std::runtime_error(format("allocate(%zu) returned %p: null, misaligned or outside the pool", bytes, ptr));
    }
    if (const std::size_t reported = s_.pool.block_size(ptr); reported != bytes) {
      throw std::runtime_error(format("block_size(%p) = %zu right after allocate(%zu)", ptr, reported, bytes));
    }
    const std::uint32_t tag = new_tag();
    s_.device.fill(ptr, bytes, tag, stream(on));
    live_.push_back(LiveBlock{ptr, bytes, tag, on});
  }

  void free_same_stream() {
    progress_.action.store("free on the same stream");
    const LiveBlock b = take(pick_live());
    s_.device.expect(b.ptr, b.bytes, b.tag, stream(b.stream));
    deallocate(b.ptr, b.stream);
    ++c_.frees_same_stream;
  }

  void free_other_stream() {
    progress_.action.store("free on another stream");
    const LiveBlock b = take(pick_live());
    const int to = other_stream(b.stream);
    // Check on the using stream before ordering, or on the freeing stream after.
    const bool check_first = rng_.chance(50);
    if (check_first) s_.device.expect(b.ptr, b.bytes, b.tag, stream(b.stream));
    if (!o_.negative_control) order(b.stream, to);
    if (!check_first) s_.device.expect(b.ptr, b.bytes, b.tag, stream(to));
    deallocate(b.ptr, to);
    ++(to == b.stream ? c_.frees_same_stream : c_.frees_other_stream);
  }

  void hand_off() {
    progress_.action.store("hand off");
    const int threads = static_cast<int>(s_.inboxes.size());
    const int target =
        threads == 1 ? index_
                     : (index_ + 1 + static_cast<int>(rng_.below(static_cast<std::uint64_t>(threads - 1)))) % threads;
    const LiveBlock b = take(pick_live());
    Handoff h{b.ptr, b.bytes, b.tag, nullptr};
    if (rng_.chance(50)) {
      check_driver(s_.driver.event_create(&h.event), "event_create");
      check_driver(s_.driver.event_record(h.event, stream(b.stream)), "event_record");
      ++c_.event_orders;
    } else {
      s_.device.synchronize(stream(b.stream));
      ++c_.host_syncs;
    }
    Inbox& inbox = *s_.inboxes[static_cast<std::size_t>(target)];
    std::lock_guard<std::mutex> lock(inbox.mutex);
    inbox.items.push_back(h);
    ++c_.handoffs_sent;
  }

  /// Takes blocks other threads handed over: a few, or all of them at the end.
  void receive(bool all) {
    progress_.action.store("receive");
    std::vector<Handoff> got;
    {
      Inbox& inbox = *s_.inboxes[static_cast<std::size_t>(index_)];
      std::lock_guard<std::mutex> lock(inbox.mutex);
      const std::size_t n = all ? inbox.items.size() : std::min<std::size_t>(inbox.items.size(), 4);
      got.assign(inbox.items.end() - static_cast<std::ptrdiff_t>(n), inbox.items.end());
      inbox.items.resize(inbox.items.size() - n);
    }
    for (const Handoff& h : got) {
      const int on = static_cast<int>(rng_.below(streams_.size()));
      if (h.event != nullptr) {
        check_driver(s_.driver.stream_wait_event(stream(on), h.event), "stream_wait_event");
        check_driver(s_.driver.event_destroy(h.event), "event_destroy");
      }
      s_.device.expect(h.ptr, h.bytes, h.tag, stream(on));
      ++c_.handoffs_received;
      if (!all && live_.size() < o_.max_live && rng_.chance(30)) {
        // Adopt it: this thread uses it further and frees it later.
        const std::uint32_t tag = new_tag();
        s_.device.fill(h.ptr, h.bytes, tag, stream(on));
        live_.push_back(LiveBlock{h.ptr, h.bytes, tag, on});
        ++c_.adopted;
      } else {
        deallocate(h.ptr, on);
        ++c_.frees_same_stream;
      }
    }
  }

  void retag() {
    progress_.action.store("retag");
    LiveBlock& b = live_[pick_live()];
    s_.device.expect(b.ptr, b.bytes, b.tag, stream(b.stream));
    if (rng_.chance(40)) {
      const int to = other_stream(b.stream);
      order(b.stream, to);
      if (to != b.stream) ++c_.migrations;
      b.stream = to;
    }
    b.tag = new_tag();
    s_.device.fill(b.ptr, b.bytes, b.tag, stream(b.stream));
    ++c_.retags;
  }

  void busy() {
    progress_.action.store("busy");
    const auto us = std::chrono::microseconds(rng_.below(std::uint64_t{o_.max_busy_us} + 1));
    s_.device.busy(stream(static_cast<int>(rng_.below(streams_.size()))), us);
    ++c_.busy;
  }

  void host_sync() {
    progress_.action.store("host sync");
    s_.device.synchronize(stream(static_cast<int>(rng_.below(streams_.size()))));
    ++c_.host_syncs;
  }

  void free_many() {
    progress_.action.store("free many");
    // A burst: about half of what the thread holds, each on its own stream.
    for (std::size_t i = live_.size(); i-- > 0;) {
      if (!rng_.chance(50)) continue;
      const LiveBlock b = take(i);
      s_.device.expect(b.ptr, b.bytes, b.tag, stream(b.stream));
      deallocate(b.ptr, b.stream);
      ++c_.frees_same_stream;
    }
  }

  /// Requests that must fail, or do nothing, and leave the pool as it was.
  void probe() {
    progress_.action.store("probe");
    ++c_.probes;
    const cudaStream_t on = stream(static_cast<int>(rng_.below(streams_.size())));
    void* ptr = reinterpret_cast<void*>(1);
    cudaError_t e = s_.pool.try_allocate(&ptr, std::size_t{1} << 60, on);
    if (e != cudaErrorMemoryAllocation || ptr != nullptr) {
      throw std::runtime_error(format("try_allocate(2^60) returned %s, %p", cudaGetErrorName(e), ptr));
    }
    ptr = reinterpret_cast<void*>(1);
    e = s_.pool.try_allocate(&ptr, 0, on);
    if (e != cudaSuccess || ptr != nullptr) {
      throw std::runtime_error(format("try_allocate(0) returned %s, %p", cudaGetErrorName(e), ptr));
    }
    const LiveBlock& b = live_[pick_live()];
    if (b.bytes > 256) {
      void* interior = static_cast<char*>(b.ptr) + 256;
      e = s_.pool.try_deallocate(interior, on);
      if (e != cudaErrorInvalidValue) {
        throw std::runtime_error(
            format("try_deallocate(interior pointer %p of %p) returned %s", interior, b.ptr, cudaGetErrorName(e)));
      }
    }
  }

  void checkpoint(std::uint64_t op) {
    progress_.action.store("check_invariants");
    try {
      s_.pool.check_invariants();
    } catch (const std::exception& e) {
      throw std::runtime_error(format("check_invariants after %" PRIu64 " ops of thread 0: %s", op, e.what()));
    }
    const std::uint64_t wrong = s_.device.mismatches();  // what expect() found so far
    if (wrong != 0 && !reported_mismatch_) {
      reported_mismatch_ = true;
      std::fprintf(stderr, "sova_stress: %" PRIu64 " mismatching words seen by op %" PRIu64 " of thread 0\n", wrong,
                   op);
    }
    if (o_.verbose) {
      const PoolStats st = s_.pool.stats();
      std::printf("  thread 0 op %" PRIu64 ": reserved %.1f MiB, used %.1f MiB in %" PRIu64
                  " blocks, cross-stream reuses %" PRIu64 ", waits %" PRIu64 "\n",
                  op, mib(st.reserved_current), mib(st.used_current), st.live_blocks, st.cross_stream_reuses,
                  st.cross_stream_waits);
      std::fflush(stdout);
    }
  }

  Shared& s_;
  const Options& o_;
  const int index_;
  Rng rng_;
  const std::vector<cudaStream_t>& streams_;
  Progress& progress_;
  std::vector<LiveBlock> live_;
  std::uint64_t tags_ = 0;
  bool reported_mismatch_ = false;
  Counters c_;
};

/// Aborts the process, saying where each thread was, when no thread makes
/// progress for options.watchdog_s: a hang in the pool fails the run instead
/// of stalling CI until its timeout.
class Watchdog {
 public:
  Watchdog(Shared& shared) : s_(shared) {
    if (s_.options.watchdog_s > 0) thread_ = std::thread([this] { watch(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  /// Marks progress outside the threads' operations (the final checks).
  void phase(const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = what;
    ++phase_count_;
  }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    std::uint64_t last = ~std::uint64_t{0};
    auto since = Clock::now();
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return done_; })) {
      std::uint64_t sum = phase_count_;
      for (auto& p : s_.progress) sum += p->ops.load(std::memory_order_relaxed);
      const auto now = Clock::now();
      if (sum != last) {
        last = sum;
        since = now;
        continue;
      }
      if (std::chrono::duration<double>(now - since).count() < s_.options.watchdog_s) continue;
      std::fprintf(stderr, "sova_stress: FAILED: no progress for %.0f s (phase: %s); threads:\n", s_.options.watchdog_s,
                   phase_);
      for (std::size_t t = 0; t < s_.progress.size(); ++t) {
        std::fprintf(stderr, "  thread %zu: %" PRIu64 " ops, in %s\n", t, s_.progress[t]->ops.load(),
                     s_.progress[t]->action.load());
      }
      std::fflush(stderr);
      std::abort();
    }
  }

  Shared& s_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  const char* phase_ = "workload";
  std::uint64_t phase_count_ = 0;
  std::thread thread_;
};

void set_reuse(Pool& pool, Reuse reuse) {
  const int opportunistic = reuse == Reuse::all || reuse == Reuse::opportunistic;
  const int internal = reuse == Reuse::all || reuse == Reuse::internal;
  const int follow = reuse != Reuse::none;
  auto set = [&](cudaMemPoolAttr attr, int value, const char* name) {
    const cudaError_t e = pool.set_attribute(attr, &value);
    if (e != cudaSuccess) throw std::runtime_error(format("set_attribute(%s) failed: %s", name, cudaGetErrorName(e)));
    int back = -1;
    if (pool.get_attribute(attr, &back) != cudaSuccess || back != value) {
      throw std::runtime_error(format("get_attribute(%s) = %d after setting %d", name, back, value));
    }
  };
  set(cudaMemPoolReuseAllowOpportunistic, opportunistic, "cudaMemPoolReuseAllowOpportunistic");
  set(cudaMemPoolReuseAllowInternalDependencies, internal, "cudaMemPoolReuseAllowInternalDependencies");
  set(cudaMemPoolReuseFollowEventDependencies, follow, "cudaMemPoolReuseFollowEventDependencies");
}

}  // namespace

int run_stress(const Options& o, TestDevice& device) {
  PoolOptions pool_options;
  pool_options.driver = &device.driver();
  pool_options.max_size = o.pool_limit;
  pool_options.release_threshold = o.release_threshold;
  Pool pool(pool_options);
  set_reuse(pool, o.reuse);

  Shared shared(o, device, pool);
  for (int t = 0; t < o.threads; ++t) {
    std::vector<cudaStream_t> mine;
    for (int i = 0; i < o.streams_per_thread; ++i) mine.push_back(device.create_stream());
    shared.streams.push_back(std::move(mine));
    shared.inboxes.push_back(std::make_unique<Inbox>());
    shared.progress.push_back(std::make_unique<Progress>());
  }
  std::printf("sova_stress: %s driver, seed %" PRIu64 ", %d threads x %d streams, %" PRIu64
              " ops per thread, blocks %zu B..%zu B, reuse %s, release threshold %" PRIu64 ", pool limit %zu%s%s\n",
              device.driver().name(), o.seed, o.threads, o.streams_per_thread, o.ops, o.min_block, o.max_block,
              reuse_name(o.reuse), o.release_threshold, o.pool_limit,
              o.smoke ? (o.tsan_scaled ? " (smoke, scaled down for ThreadSanitizer)" : " (smoke)") : "",
              o.negative_control ? " (NEGATIVE CONTROL: frees on another stream are not ordered; expect FAILED)" : "");
  std::fflush(stdout);

  Counters total;
  double seconds = 0;
  {
    Watchdog watchdog(shared);
    shared.start = Clock::now();
    std::vector<std::unique_ptr<Worker>> workers;
    for (int t = 0; t < o.threads; ++t) workers.push_back(std::make_unique<Worker>(shared, t));
    std::vector<std::thread> threads;
    for (auto& w : workers) threads.emplace_back([&w] { w->run(); });
    for (auto& th : threads) th.join();
    seconds = std::chrono::duration<double>(Clock::now() - shared.start).count();
    for (auto& w : workers) total.add(w->counters());

    // Blocks handed over after their receiver had finished: free them here,
    // checked, on a stream ordered after their last use.
    watchdog.phase("draining hand-offs");
    const cudaStream_t last = shared.streams[0][0];
    for (auto& inbox : shared.inboxes) {
      for (const Handoff& h : inbox->items) {
        try {
          if (h.event != nullptr) {
            if (shared.driver.stream_wait_event(last, h.event) != cudaSuccess ||
                shared.driver.event_destroy(h.event) != cudaSuccess) {
              shared.fail("draining hand-offs: stream_wait_event/event_destroy failed");
            }
          }
          device.expect(h.ptr, h.bytes, h.tag, last);
          pool.deallocate(h.ptr, last);
          ++total.frees;
          ++total.handoffs_received;
        } catch (const std::exception& e) {
          shared.fail(format("draining hand-offs: %s", e.what()));
        }
      }
      inbox->items.clear();
    }

    watchdog.phase("final synchronize");
    device.synchronize_device();
    watchdog.phase("final checks");
  }

  const std::uint64_t mismatches = device.mismatches();
  if (mismatches != 0) {
    shared.fail(format("%" PRIu64 " words did not hold their block's tag: the pool handed out memory still in use "
                       "(or two live blocks overlap)",
                       mismatches));
  }
  const PoolStats st = pool.stats();
  if (st.used_current != 0 || st.live_blocks != 0) {
    shared.fail(format("after freeing everything the pool reports %" PRIu64 " B used in %" PRIu64 " live blocks",
                       st.used_current, st.live_blocks));
  }
  if (st.allocations != total.allocations || st.deallocations != total.frees) {
    shared.fail(format("the pool counted %" PRIu64 " allocations and %" PRIu64
                       " deallocations; the workload made %" PRIu64 " and %" PRIu64,
                       st.allocations, st.deallocations, total.allocations, total.frees));
  }
  try {
    pool.check_invariants();
  } catch (const std::exception& e) {
    shared.fail(format("check_invariants at the end: %s", e.what()));
  }
  // Nothing is live and the device is idle: trim must be able to give back everything.
  pool.trim_to(0);
  const PoolStats trimmed = pool.stats();
  if (trimmed.reserved_current != 0) {
    shared.fail(format("trim_to(0) with nothing live left %" PRIu64 " B reserved", trimmed.reserved_current));
  }
  try {
    pool.check_invariants();
  } catch (const std::exception& e) {
    shared.fail(format("check_invariants after trim_to(0): %s", e.what()));
  }
  for (auto& mine : shared.streams) {
    for (cudaStream_t s : mine) device.destroy_stream(s);
  }

  std::printf("sova_stress: %" PRIu64 " ops in %.2f s (%.0f ops/s)%s: %" PRIu64 " allocations (%.1f MiB), %" PRIu64
              " frees (%" PRIu64 " on another stream, %" PRIu64 " handed to another thread, %" PRIu64
              " adopted), %" PRIu64 " retags (%" PRIu64 " migrated), %" PRIu64 " busy, %" PRIu64
              " host stream syncs, %" PRIu64 " event orders, %" PRIu64 " out of memory\n",
              total.ops, seconds, seconds > 0 ? static_cast<double>(total.ops) / seconds : 0.0,
              shared.timed_out.load() ? " (stopped at --time-limit)" : "", total.allocations,
              mib(total.bytes_allocated), total.frees, total.frees_other_stream, total.handoffs_sent, total.adopted,
              total.retags, total.migrations, total.busy, total.host_syncs, total.event_orders, total.out_of_memory);
  std::printf("sova_stress: pool: %" PRIu64 " fast-path hits, %" PRIu64 " cross-stream reuses, %" PRIu64
              " cross-stream waits, %" PRIu64 " events recorded, %" PRIu64 " device synchronizes, %" PRIu64
              " chunks mapped / %" PRIu64 " unmapped, peak reserved %.1f MiB, peak used %.1f MiB, %" PRIu64
              " failed allocations; mismatches %" PRIu64 "\n",
              st.fast_path_hits, st.cross_stream_reuses, st.cross_stream_waits, st.events_recorded,
              st.device_synchronizes, trimmed.chunks_mapped, trimmed.chunks_unmapped, mib(st.reserved_high),
              mib(st.used_high), st.failed_allocations, mismatches);

  std::lock_guard<std::mutex> lock(shared.failure_mutex);
  if (!shared.failures.empty()) {
    for (const std::string& f : shared.failures) std::fprintf(stderr, "sova_stress: FAILED: %s\n", f.c_str());
    std::fprintf(stderr, "sova_stress: FAILED (seed %" PRIu64 ", reuse %s)\n", o.seed, reuse_name(o.reuse));
    return 1;
  }
  std::printf("sova_stress: OK\n");
  return 0;
}

}  // namespace sova::stress
