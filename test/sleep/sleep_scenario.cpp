// The randomized sleep and wake scenario's generator (sleep_scenario.hpp),
// the same on every device.
#include "sleep/sleep_scenario.hpp"

#include <sova/error.hpp>
#include <sova/pool.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

namespace sova::sleep_test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;

/// The RL loop's sizes (bench/torch/sleep_wake_rl.py) over 512, the small ones as they are: a
/// 2 MiB granule becomes 4 KiB (or up to 64 KiB on the simulation), and
/// SleepScenarioDevice::scale() brings them back up on a GPU.
constexpr std::size_t kMix[] = {2048 * KiB, 512 * KiB, 192 * KiB + 4100, 4 * KiB, 777, 6 * KiB, 128 * KiB};

struct Block {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint64_t seed = 0;
  int stream = 0;     ///< the pool's stream that last wrote or read it
  bool known = true;  ///< its contents are defined (not after a discarding sleep)
};

/// One pool of the program, its two streams (0: sleep and wake's), its live
/// blocks and the sizes freed lately (what another stream asks for again).
struct PoolUnderTest {
  std::unique_ptr<Pool> pool;
  cudaStream_t streams[2] = {nullptr, nullptr};
  std::vector<Block> live;
  std::vector<std::size_t> freed_sizes;
  bool discarded = false;  ///< the current sleep discarded the contents
};

class Scenario {
 public:
  Scenario(std::uint64_t seed, ScenarioCounts& counts, SleepScenarioDevice& device)
      : rng_(seed), counts_(counts), dev_(device), driver_(device.driver()) {}

  std::string run() {
    try {
      const int pools = 1 + static_cast<int>(pick(3));
      for (int i = 0; i < pools; ++i) make_pool();
      const int steps = 20 + static_cast<int>(pick(40));
      for (int i = 0; i < steps && error_.empty(); ++i) step(pools_[pick(pools_.size())]);
      if (error_.empty()) finish();
    } catch (const std::exception& e) {
      fail(std::string("threw: ") + e.what());
    }
    if (!error_.empty()) abandon();
    return error_;
  }

 private:
  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  /// A size of the simulation's scale on this device: the 4 KiB pages
  /// scaled, the odd tail kept.
  std::size_t sized(std::size_t bytes) const { return bytes / (4 * KiB) * (4 * KiB) * dev_.scale() + bytes % (4 * KiB); }

  void fail(const std::string& what) {
    if (!error_.empty()) return;
    std::ostringstream out;
    out << "step " << step_ << ": " << what;
    if (const std::string fault = dev_.fault(); !fault.empty()) out << " (device fault: " << fault << ")";
    error_ = out.str();
  }

  /// Orders `from`'s work so far before `to`'s later work.
  void order(cudaStream_t from, cudaStream_t to) {
    if (from == to) return;
    EventHandle e{};
    if (driver_.event_create(&e) != cudaSuccess) throw std::runtime_error("event_create");
    const bool ok = driver_.event_record(e, from) == cudaSuccess && driver_.stream_wait_event(to, e) == cudaSuccess;
    (void)driver_.event_destroy(e);
    if (!ok) throw std::runtime_error("ordering one stream after another");
  }

  /// Both streams' work on `p`'s blocks ordered before stream `to`'s next work.
  void join(PoolUnderTest& p, int to) {
    order(p.streams[1 - to], p.streams[to]);
    for (Block& b : p.live) b.stream = to;
  }

  void make_pool() {
    PoolOptions o;
    o.driver = &driver_;
    o.max_chunk = (std::size_t{1} << pick(4)) * 64 * KiB * dev_.scale();  // many chunks
    if (chance(0.3)) o.release_threshold = 0;                              // the release worker may run meanwhile
    else o.release_threshold = UINT64_MAX;
    PoolUnderTest p;
    p.pool = std::make_unique<Pool>(o);
    for (cudaStream_t& s : p.streams) {
      if (driver_.stream_create(0, &s) != cudaSuccess) throw std::runtime_error("stream_create");
    }
    pools_.push_back(std::move(p));
    // The mix, repeated to the pool's share of the device.
    PoolUnderTest& made = pools_.back();
    const std::size_t target = (1 + pick(6)) * 512 * KiB * dev_.scale();
    std::size_t held = 0;
    for (std::size_t i = pick(std::size(kMix)); held < target; ++i) {
      const std::size_t bytes = sized(kMix[i % std::size(kMix)]);
      if (!allocate(made, bytes, static_cast<int>(pick(2)))) break;
      held += bytes;
    }
  }

  Block* allocate(PoolUnderTest& p, std::size_t bytes, int stream) {
    void* ptr = nullptr;
    try {
      ptr = p.pool->allocate(bytes, p.streams[stream]);
    } catch (const OutOfMemory&) {
      return nullptr;  // the device, or the pool's share of it, is full
    } catch (const Error& e) {
      fail(std::string("allocate: ") + e.what());
      return nullptr;
    }
    p.live.push_back(Block{ptr, bytes, next_seed_++, stream, true});
    dev_.fill(ptr, bytes, p.live.back().seed, p.streams[stream]);  // the stream's work writes it
    return &p.live.back();
  }

  void free_one(PoolUnderTest& p) {
    if (p.live.empty()) return;
    const std::size_t i = pick(p.live.size());
    const int stream = static_cast<int>(pick(2));
    // The free is ordered after its stream's work only: the block's last
    // work, on the other stream, is ordered before it first.
    order(p.streams[p.live[i].stream], p.streams[stream]);
    p.pool->deallocate(p.live[i].ptr, p.streams[stream]);
    p.freed_sizes.push_back(p.live[i].bytes);
    p.live.erase(p.live.begin() + static_cast<std::ptrdiff_t>(i));
  }

  /// Every kept block holds its bytes: counted on stream 0 (after both
  /// streams' work), the first wrong one named.
  void check_blocks(PoolUnderTest& p, const char* when) {
    join(p, 0);
    (void)dev_.take_wrong();
    for (const Block& b : p.live) {
      if (!b.known) continue;
      ++counts_.blocks_checked;
      dev_.count_wrong(b.ptr, b.bytes, b.seed, p.streams[0]);
    }
    if (driver_.stream_synchronize(p.streams[0]) != cudaSuccess) return fail(std::string("synchronize ") + when);
    if (dev_.take_wrong() == 0) return;
    for (const Block& b : p.live) {  // which one
      if (!b.known) continue;
      dev_.count_wrong(b.ptr, b.bytes, b.seed, p.streams[0]);
      (void)driver_.stream_synchronize(p.streams[0]);
      if (const std::uint64_t wrong = dev_.take_wrong(); wrong != 0) {
        std::ostringstream out;
        out << when << ": a block of " << b.bytes << " bytes at " << b.ptr << " lost " << wrong << " bytes";
        return fail(out.str());
      }
    }
    fail(std::string(when) + ": bytes lost, in no block when checked alone");
  }

  void step(PoolUnderTest& p) {
    ++step_;
    const bool asleep = p.pool->asleep();
    switch (pick(8)) {
      case 0:
      case 1:
        if (asleep) {
          try {
            p.pool->allocate(4 * KiB, p.streams[0]);
            fail("an asleep pool allocated");
          } catch (const Error& e) {
            if (e.error() != cudaErrorNotPermitted) fail(std::string("asleep allocate: ") + e.what());
          }
        } else {
          const std::size_t bytes = chance(0.7) ? sized(kMix[pick(std::size(kMix))]) : 1 + pick(256 * KiB * dev_.scale());
          allocate(p, bytes, static_cast<int>(pick(2)));
        }
        break;
      case 2:
      case 3:
        if (asleep) ++counts_.frees_asleep;
        free_one(p);
        break;
      case 4:
        if (asleep) ++counts_.trims_asleep;
        p.pool->trim_to(chance(0.5) ? 0 : p.pool->stats().reserved_current / 2);
        break;
      case 5:
      case 6:
        if (asleep) wake(p);
        else sleep(p);
        break;
      default:
        if (asleep) sleep(p);  // finishes a sleep a failed unmap cut short
        else wake(p);          // awake: nothing to do
        break;
    }
    if (error_.empty()) check_pool(p);
  }

  void arm(std::initializer_list<FailingCall> calls, int choices) {
    const std::size_t choice = pick(static_cast<std::size_t>(choices));
    if (!dev_.injects_failures() || choice >= calls.size()) return;  // most often none
    dev_.fail_at(calls.begin()[choice], 1 + static_cast<int>(pick(3)));
  }

  void sleep(PoolUnderTest& p) {
    const bool was_asleep = p.pool->asleep();
    const bool backup = chance(0.8);
    // One of sleep's calls fails, or none.
    arm({FailingCall::unmap, FailingCall::memcpy, FailingCall::host_register, FailingCall::host_map}, 8);
    join(p, 0);  // every stream's work on the pool before the sleep's stream
    const cudaError_t error = p.pool->sleep(backup ? SleepMode::backup : SleepMode::discard, p.streams[0]);
    dev_.disarm();
    ++counts_.sleeps;
    if (!was_asleep) p.discarded = !backup;
    if (error == cudaSuccess) {
      if (!p.pool->asleep()) fail("a sleep that succeeded left the pool awake");
    } else if (p.pool->asleep()) {
      ++counts_.cut_short_sleeps;
    } else {
      ++counts_.failed_sleeps;
      if (was_asleep) fail("a failed sleep woke the pool");
      check_blocks(p, "after a failed sleep");  // awake as it was
    }
  }

  void wake(PoolUnderTest& p) {
    const bool was_asleep = p.pool->asleep();
    arm({FailingCall::physical_create, FailingCall::map, FailingCall::set_access, FailingCall::memcpy},
        7);  // one of wake's calls fails, or none
    const bool late = chance(0.6);
    if (late) dev_.hold(p.streams[0]);
    const cudaError_t error = p.pool->wake(p.streams[0]);
    dev_.end_hold();
    dev_.disarm();
    if (!was_asleep) {
      if (error != cudaSuccess) fail("waking an awake pool failed");
      return;
    }
    ++counts_.wakes;
    if (error != cudaSuccess) {
      ++counts_.failed_wakes;
      if (!p.pool->asleep()) fail("a failed wake left the pool awake");
      return;
    }
    if (late) ++counts_.late_restores;
    // What follows wake before its copies run: another stream takes the
    // sizes freed lately (the free memory the restore must not write) and
    // writes them; a trim releases what is free.
    std::vector<Block> taken;
    if (!p.freed_sizes.empty() && chance(0.7)) {
      for (std::size_t bytes : p.freed_sizes) {
        if (Block* b = allocate(p, bytes, 1)) taken.push_back(*b);
      }
      counts_.reuses_after_wake += static_cast<long>(taken.size());
    }
    p.freed_sizes.clear();
    if (chance(0.5)) {
      ++counts_.trims_after_wake;
      p.pool->trim_to(0);
    }
    // A kernel on the wake's stream reads every kept block: mapped, and after the restore.
    for (const Block& b : p.live) dev_.touch(b.ptr, b.bytes, p.streams[0]);
    if (driver_.stream_synchronize(p.streams[0]) != cudaSuccess) return fail("synchronize after wake");
    if (!dev_.fault().empty()) return fail("a device fault after wake");
    if (p.discarded) {
      for (Block& b : p.live) {
        const bool mine = std::any_of(taken.begin(), taken.end(), [&](const Block& t) { return t.ptr == b.ptr; });
        if (!mine) {  // undefined after a discarding sleep: the stream writes them anew
          dev_.fill(b.ptr, b.bytes, b.seed, p.streams[0]);
          b.stream = 0;
        }
      }
    }
    check_blocks(p, "after wake");
  }

  void check_pool(PoolUnderTest& p) {
    try {
      p.pool->check_invariants();
    } catch (const Error& e) {
      fail(std::string("invariants: ") + e.what());
    }
    if (!physical_matches_reserved()) fail("the device holds other than the pools' reserved bytes");
    if (!dev_.fault().empty()) fail("a device fault");
  }

  /// The device's physical bytes equal the pools' reserved ones (where the
  /// device counts them). A release worker may be between its unmap and its
  /// statistics' update when they are read: asked again for up to 2 s, a
  /// leak or a double count never matches.
  bool physical_matches_reserved() {
    for (int attempt = 0; attempt < 2000; ++attempt) {
      std::size_t physical = 0;
      if (!dev_.physical_bytes(&physical)) return true;
      std::size_t reserved = 0;
      for (const PoolUnderTest& q : pools_) reserved += q.pool->stats().reserved_current;
      if (physical == reserved) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  void finish() {
    for (PoolUnderTest& p : pools_) {
      if (p.pool->asleep()) {
        (void)p.pool->sleep(SleepMode::backup, p.streams[0]);  // finishes a cut-short sleep
        if (p.pool->wake(p.streams[0]) != cudaSuccess) fail("the last wake failed");
        if (driver_.stream_synchronize(p.streams[0]) != cudaSuccess) fail("synchronize after the last wake");
        if (p.discarded) {
          for (Block& b : p.live) b.known = false;
        }
        check_blocks(p, "after the last wake");
      }
      join(p, 0);
      for (const Block& b : p.live) p.pool->deallocate(b.ptr, p.streams[0]);
      p.live.clear();
    }
    release_all();
    if (const std::string left = dev_.leftovers(); !left.empty()) fail("once the pools were destroyed: " + left);
    if (!dev_.fault().empty()) fail("a device fault");
  }

  /// The pools destroyed after their streams' work, the streams with them.
  void release_all() {
    for (PoolUnderTest& p : pools_) {
      for (cudaStream_t s : p.streams) (void)driver_.stream_synchronize(s);
      p.pool.reset();
      for (cudaStream_t s : p.streams) (void)driver_.stream_destroy(s);
    }
    pools_.clear();
  }

  /// After a broken promise: the pools given back as far as they can be, so
  /// that the next program on the same device starts clean.
  void abandon() {
    dev_.disarm();
    for (PoolUnderTest& p : pools_) {
      if (p.pool && p.pool->asleep()) (void)p.pool->wake(p.streams[0]);
    }
    release_all();
  }

  std::mt19937_64 rng_;
  ScenarioCounts& counts_;
  SleepScenarioDevice& dev_;
  Driver& driver_;
  std::vector<PoolUnderTest> pools_;
  std::uint64_t next_seed_ = 1;
  int step_ = 0;
  std::string error_;
};

}  // namespace

std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts, SleepScenarioDevice& device) {
  return Scenario(seed, counts, device).run();
}

}  // namespace sova::sleep_test
