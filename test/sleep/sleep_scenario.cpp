// The randomized sleep and wake scenario (sleep_scenario.hpp).
#include "sleep/sleep_scenario.hpp"

#include <sova/error.hpp>
#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <vector>

namespace sova::sleep_test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// The RL loop's sizes (issue 36) over 512, the small ones as they are: a
/// 2 MiB granule becomes 4 KiB (or up to 64 KiB: SimConfig below).
constexpr std::size_t kMix[] = {2 * MiB, 512 * KiB, 192 * KiB + 4100, 4 * KiB, 777, 6 * KiB, 128 * KiB};

struct Block {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint64_t seed = 0;
  bool known = true;  ///< its contents are defined (not after a discarding sleep)
};

std::uint64_t word(std::uint64_t seed, std::size_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 27);
}

void fill(const Block& b) {
  auto* p = static_cast<unsigned char*>(b.ptr);
  for (std::size_t i = 0; i + 8 <= b.bytes; i += 8) {
    const std::uint64_t w = word(b.seed, i);
    std::memcpy(p + i, &w, 8);
  }
  for (std::size_t i = b.bytes / 8 * 8; i < b.bytes; ++i) p[i] = static_cast<unsigned char>(b.seed + i);
}

bool intact(const Block& b) {
  const auto* p = static_cast<const unsigned char*>(b.ptr);
  for (std::size_t i = 0; i + 8 <= b.bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != word(b.seed, i)) return false;
  }
  for (std::size_t i = b.bytes / 8 * 8; i < b.bytes; ++i) {
    if (p[i] != static_cast<unsigned char>(b.seed + i)) return false;
  }
  return true;
}

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
  Scenario(std::uint64_t seed, ScenarioCounts& counts) : rng_(seed), counts_(counts), sim_(config()) {}

  std::string run() {
    try {
      const int pools = 1 + pick(3);
      for (int i = 0; i < pools; ++i) make_pool();
      const int steps = 20 + pick(40);
      for (int i = 0; i < steps && error_.empty(); ++i) step(pools_[pick(pools_.size())]);
      if (error_.empty()) finish();
    } catch (const std::exception& e) {
      fail(std::string("threw: ") + e.what());
    }
    return error_;
  }

 private:
  SimConfig config() {
    SimConfig c;
    c.total_memory = 64 * MiB;
    c.granularity = (std::size_t{4} << pick(5)) * KiB;  // 4 to 64 KiB
    c.abort_on_fault = false;
    return c;
  }

  std::size_t pick(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  void fail(const std::string& what) {
    if (!error_.empty()) return;
    std::ostringstream out;
    out << "step " << step_ << ": " << what;
    if (sim_.faults() != 0) out << " (device fault: " << sim_.first_fault() << ")";
    error_ = out.str();
  }

  void make_pool() {
    PoolOptions o;
    o.driver = &sim_;
    o.max_chunk = (std::size_t{1} << pick(4)) * 64 * KiB;  // 64 to 512 KiB: many chunks
    if (chance(0.3)) o.release_threshold = 0;               // the release worker may run meanwhile
    else o.release_threshold = UINT64_MAX;
    PoolUnderTest p;
    p.pool = std::make_unique<Pool>(o);
    p.streams[0] = sim_.create_stream();
    p.streams[1] = sim_.create_stream();
    pools_.push_back(std::move(p));
    // The mix, repeated to the pool's share of the device.
    PoolUnderTest& made = pools_.back();
    const std::size_t target = (1 + pick(6)) * 512 * KiB;
    std::size_t held = 0;
    for (std::size_t i = pick(std::size(kMix)); held < target; ++i) {
      const std::size_t bytes = kMix[i % std::size(kMix)];
      if (!allocate(made, bytes, pick(2))) break;
      held += bytes;
    }
  }

  Block* allocate(PoolUnderTest& p, std::size_t bytes, std::size_t stream) {
    void* ptr = nullptr;
    try {
      ptr = p.pool->allocate(bytes, p.streams[stream]);
    } catch (const OutOfMemory&) {
      return nullptr;  // the device, or the pool's share of it, is full
    } catch (const Error& e) {
      fail(std::string("allocate: ") + e.what());
      return nullptr;
    }
    p.live.push_back(Block{ptr, bytes, next_seed_++, true});
    fill(p.live.back());  // the stream's work writes it at once
    return &p.live.back();
  }

  void free_one(PoolUnderTest& p) {
    if (p.live.empty()) return;
    const std::size_t i = pick(p.live.size());
    p.pool->deallocate(p.live[i].ptr, p.streams[pick(2)]);
    p.freed_sizes.push_back(p.live[i].bytes);
    p.live.erase(p.live.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void disarm() {
    sim_.fail_unmap_at(0);
    sim_.fail_memcpy_at(0);
    sim_.fail_host_alloc_at(0);
    sim_.fail_physical_create_at(0);
    sim_.fail_map_at(0);
    sim_.fail_set_access_at(0);
  }

  void check_blocks(const PoolUnderTest& p, const char* when) {
    for (const Block& b : p.live) {
      if (!b.known) continue;
      ++counts_.blocks_checked;
      if (!intact(b)) {
        std::ostringstream out;
        out << when << ": a block of " << b.bytes << " bytes at " << b.ptr << " lost its bytes";
        fail(out.str());
        return;
      }
    }
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
          allocate(p, chance(0.7) ? kMix[pick(std::size(kMix))] : 1 + pick(256 * KiB), pick(2));
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

  void sleep(PoolUnderTest& p) {
    const bool was_asleep = p.pool->asleep();
    const bool backup = chance(0.8);
    switch (pick(6)) {  // a failure at one of sleep's driver calls, or none
      case 0: sim_.fail_unmap_at(1 + static_cast<int>(pick(3))); break;
      case 1: sim_.fail_memcpy_at(1 + static_cast<int>(pick(3))); break;
      case 2: sim_.fail_host_alloc_at(1); break;
      default: break;
    }
    const cudaError_t error = p.pool->sleep(backup ? SleepMode::backup : SleepMode::discard, p.streams[0]);
    disarm();
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
    switch (pick(7)) {  // a failure at one of wake's driver calls, or none
      case 0: sim_.fail_physical_create_at(1 + static_cast<int>(pick(3))); break;
      case 1: sim_.fail_map_at(1 + static_cast<int>(pick(3))); break;
      case 2: sim_.fail_set_access_at(1 + static_cast<int>(pick(2))); break;
      case 3: sim_.fail_memcpy_at(1 + static_cast<int>(pick(3))); break;
      default: break;
    }
    const bool late = chance(0.6);
    if (late) sim_.delay_copies(std::chrono::microseconds(200));
    const cudaError_t error = p.pool->wake(p.streams[0]);
    sim_.delay_copies(std::chrono::microseconds(0));
    disarm();
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
    for (const Block& b : p.live) sim_.launch_touching(p.streams[0], b.ptr, b.bytes, false, nullptr);
    if (sim_.stream_synchronize(p.streams[0]) != cudaSuccess) fail("synchronize after wake");
    if (sim_.faults() != 0) fail("a device fault after wake");
    if (p.discarded) {
      for (Block& b : p.live) {
        const bool mine = std::any_of(taken.begin(), taken.end(), [&](const Block& t) { return t.ptr == b.ptr; });
        if (!mine) fill(b);  // undefined after a discarding sleep: the stream writes them anew
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
    std::size_t reserved = 0;
    for (const PoolUnderTest& q : pools_) reserved += q.pool->stats().reserved_current;
    if (sim_.counters().physical_bytes != reserved) fail("the device holds other than the pools' reserved bytes");
    if (sim_.faults() != 0) fail("a device fault");
  }

  void finish() {
    for (PoolUnderTest& p : pools_) {
      if (p.pool->asleep()) {
        (void)p.pool->sleep(SleepMode::backup, p.streams[0]);  // finishes a cut-short sleep
        if (p.pool->wake(p.streams[0]) != cudaSuccess) fail("the last wake failed");
        if (sim_.stream_synchronize(p.streams[0]) != cudaSuccess) fail("synchronize after the last wake");
        if (p.discarded) {
          for (Block& b : p.live) b.known = false;
        }
        check_blocks(p, "after the last wake");
      }
      for (const Block& b : p.live) p.pool->deallocate(b.ptr, p.streams[0]);
      p.live.clear();
    }
    for (PoolUnderTest& p : pools_) {
      (void)sim_.stream_synchronize(p.streams[0]);
      (void)sim_.stream_synchronize(p.streams[1]);
      p.pool.reset();
      sim_.destroy_stream(p.streams[0]);
      sim_.destroy_stream(p.streams[1]);
    }
    const SimCounters left = sim_.counters();
    if (left.physical_bytes != 0 || left.mappings != 0 || left.reservations != 0 || left.pinned_host_bytes != 0) {
      fail("memory left with the driver once the pools were destroyed");
    }
    if (sim_.faults() != 0) fail("a device fault");
  }

  std::mt19937_64 rng_;
  ScenarioCounts& counts_;
  SimDriver sim_;
  std::vector<PoolUnderTest> pools_;
  std::uint64_t next_seed_ = 1;
  int step_ = 0;
  std::string error_;
};

}  // namespace

std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts) {
  Scenario scenario(seed, counts);
  return scenario.run();
}

}  // namespace sova::sleep_test
