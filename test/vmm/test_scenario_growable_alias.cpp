// Scenario tests of GrowableBuffer and BlockAlias (C++), written from the
// documentation only: docs/vmm.md ("Growable allocations", "Aliases",
// "Compressible memory", "Host memory pools"), include/sova/growable.hpp and
// include/sova/alias.hpp. Each test has its own SimDriver, so that the
// simulation's counters (physical memory, mappings, reservations) are the
// test's alone and "a failure changes nothing" can be checked on them.
//
// Random sequences are seeded: the seed is printed with every failure
// (INFO), and SOVA_SCENARIO_SEED=<n> in the environment replays one seed.
//
// Device memory is written and read with the simulation's stream-ordered
// copies (memcpy_async), which fault (recorded, SimConfig::abort_on_fault
// false) when they touch reserved memory that is not mapped with the access
// they need, as copies on a GPU would.
#include "support/catch.hpp"
#include "support/scenario_data.hpp"

#include <sova/alias.hpp>
#include <sova/growable.hpp>
#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

using namespace sova;
using sova::test::pattern;
using sova::test::scenario_seeds;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kG = 2 * kMiB;  // SimConfig's default granularity

std::size_t round_up(std::size_t v, std::size_t g) { return (v + g - 1) / g * g; }

SimConfig quiet_faults(std::size_t total = std::size_t{256} << 20) {
  SimConfig config;
  config.total_memory = total;
  config.abort_on_fault = false;  // record device faults for the test to read
  return config;
}

GrowableOptions gopts(SimDriver& sim, std::size_t max_chunk = std::size_t{256} << 20) {
  GrowableOptions o;
  o.driver = &sim;
  o.max_chunk = max_chunk;
  return o;
}

PoolOptions popts(SimDriver& sim) {
  PoolOptions o;
  o.driver = &sim;
  // No release in the background (an idle pool gives free memory back by itself): the
  // tests compare the pool's figures with the simulation's counters, read one after the other.
  o.release_threshold = std::numeric_limits<std::uint64_t>::max();
  return o;
}

/// Copies host -> device in stream order and waits for it.
cudaError_t put(SimDriver& sim, cudaStream_t s, void* dev, const void* host, std::size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  cudaError_t e = sim.memcpy_async(dev, host, bytes, s);
  if (e != cudaSuccess) return e;
  return sim.stream_synchronize(s);
}

/// Reads [dev, dev + bytes) back with a device copy and compares it with `expected`.
/// Returns the first differing offset, or SIZE_MAX when equal.
std::size_t first_mismatch(SimDriver& sim, cudaStream_t s, const void* dev, const unsigned char* expected,
                           std::size_t bytes) {
  if (bytes == 0) return std::numeric_limits<std::size_t>::max();
  static thread_local std::vector<unsigned char> back;  // reused: no fresh pages per read
  if (back.size() < bytes) back.resize(bytes);
  std::memset(back.data(), 0, bytes);
  REQUIRE(sim.memcpy_async(back.data(), dev, bytes, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  if (std::memcmp(back.data(), expected, bytes) == 0) return std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < bytes; ++i)
    if (back[i] != expected[i]) return i;
  return std::numeric_limits<std::size_t>::max();
}
constexpr std::size_t kEqual = std::numeric_limits<std::size_t>::max();

/// Whether a checked one-byte access at `p` faults (recorded, not aborted).
bool access_faults(SimDriver& sim, cudaStream_t s, const void* p, bool write) {
  const std::size_t before = sim.faults();
  std::atomic<bool> ran{false};
  sim.launch_touching(s, p, 1, write, [&ran] { ran = true; });
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  const bool faulted = sim.faults() > before;
  CHECK(faulted != ran.load());  // the sim's contract: faulting work does not run
  return faulted;
}

struct Snapshot {
  std::size_t physical, host, mappings, reservations, creates, releases;
  explicit Snapshot(const SimDriver& sim) {
    const SimCounters c = sim.counters();
    physical = c.physical_bytes;
    host = c.host_bytes;
    mappings = c.mappings;
    reservations = c.reservations;
    creates = c.physical_creates;
    releases = c.physical_releases;
  }
  // Live state only (creates/releases may differ after a rolled-back attempt).
  bool same_live(const Snapshot& o) const {
    return physical == o.physical && host == o.host && mappings == o.mappings && reservations == o.reservations;
  }
};

}  // namespace

// ---------------------------------------------------------------------------
// Growable buffers
// ---------------------------------------------------------------------------

TEST_CASE("scenario growable: random resize sequences keep the address, the contents and the memory accounting",
          "[vmm][growable][scenario]") {
  for (std::uint64_t seed : scenario_seeds({1, 2, 3, 4, 5, 6, 7, 8})) {
    INFO("seed " << seed << " (replay: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {  // [lo, hi]
      return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    const std::size_t total = std::size_t{128} << 20;
    SimDriver sim(quiet_faults(total));
    cudaStream_t s = sim.create_stream();

    struct Buf {
      std::unique_ptr<GrowableBuffer> g;
      std::size_t max = 0, max_chunk = 0, valid = 0;
      void* addr = nullptr;
      std::vector<unsigned char> ref;
    };
    std::vector<Buf> bufs(pick(1, 3));
    const std::size_t chunk_choices[] = {0, 1, kG, 3 * kMiB, 8 * kMiB, std::size_t{256} << 20};
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      Buf& b = bufs[i];
      switch (pick(0, 3)) {
        case 0: b.max = pick(1, 4096); break;         // smaller than a granule
        case 1: b.max = pick(1, 40) * kG; break;      // a granule multiple
        case 2: b.max = pick(1, 40) * kG + 1; break;  // one byte over
        default: b.max = pick(1, 96 * kMiB); break;   // anything
      }
      b.max_chunk = chunk_choices[pick(0, 5)];
      b.g = std::make_unique<GrowableBuffer>(b.max, gopts(sim, b.max_chunk));
      b.addr = b.g->data();
      b.ref = pattern(b.max, seed * 100 + i);
      REQUIRE(b.addr != nullptr);
      CHECK(b.g->size() == 0);            // "0 at first"
      CHECK(b.g->physical_bytes() == 0);  // "no physical memory yet"
      CHECK(b.g->granularity() == kG);
      CHECK(b.g->max_size() >= b.max);  // "max_size bytes (rounded up to the granularity)"
      CHECK(b.g->max_size() <= round_up(b.max, kG));
    }
    CHECK(sim.counters().physical_bytes == 0);

    auto held = [&bufs] {
      std::size_t sum = 0;
      for (auto& b : bufs) sum += b.g->physical_bytes();
      return sum;
    };

    for (int step = 0; step < 60; ++step) {
      Buf& b = bufs[pick(0, bufs.size() - 1)];
      GrowableBuffer& g = *b.g;
      const std::size_t old_size = g.size(), old_phys = g.physical_bytes();
      std::size_t target = 0;
      const int op = static_cast<int>(pick(0, 9));
      switch (op) {
        case 0: target = b.max; break;                                                 // exactly the maximum
        case 1: target = b.max + pick(1, 3 * kG); break;                               // beyond it
        case 2: target = std::numeric_limits<std::size_t>::max() - pick(0, 4); break;  // far beyond
        case 3: target = 0; break;                                                     // to zero
        case 4: target = old_size; break;                                              // the same size
        case 5: target = old_size == 0 ? 0 : pick(0, old_size - 1); break;             // shrink
        case 6: target = std::min(b.max, old_size + pick(1, 512)); break;              // a little more
        default: target = pick(0, b.max); break;                                       // anywhere
      }
      INFO("step " << step << " op " << op << ": resize " << old_size << " -> " << target << " (max " << b.max
                   << ", max_chunk " << b.max_chunk << ", physical " << old_phys << ")");
      const Snapshot before(sim);
      const std::size_t others = held() - old_phys;
      const cudaError_t e = g.resize(target, s);
      if (target > b.max) {
        // growable.hpp: "Errors change nothing: bytes > max_size(): cudaErrorInvalidValue".
        CHECK(e == cudaErrorInvalidValue);
        CHECK(g.size() == old_size);
        CHECK(g.physical_bytes() == old_phys);
        CHECK(Snapshot(sim).same_live(before));
        continue;
      }
      const bool fits = target <= old_phys || others + round_up(target, kG) <= total;
      if (!fits) {
        // "too little device memory: cudaErrorMemoryAllocation", changing nothing.
        CHECK(e == cudaErrorMemoryAllocation);
        CHECK(g.size() == old_size);
        CHECK(g.physical_bytes() == old_phys);
        CHECK(Snapshot(sim).same_live(before));
        continue;
      }
      REQUIRE(e == cudaSuccess);
      CHECK(g.data() == b.addr);  // "The address never changes"
      CHECK(g.size() == target);  // "Bytes asked for by the last successful resize"
      const std::size_t phys = g.physical_bytes();
      if (target > old_phys) {
        // Growth maps memory: "the memory held is the size rounded up to the granularity".
        CHECK(phys == round_up(target, kG));
      } else {
        // Nothing new is needed; a shrink "releases only whole chunks beyond the new size".
        CHECK(phys >= round_up(target, kG));
        CHECK(phys <= old_phys);
        if (target == 0) CHECK(phys == 0);  // every chunk lies wholly beyond 0
        if (b.max_chunk != 0 && target > 0) {
          // The chunk that holds the last byte kept is at most max_chunk (rounded to granules).
          CHECK(phys <= round_up(target, kG) - kG + round_up(b.max_chunk, kG));
        }
      }
      CHECK(sim.counters().physical_bytes == held());  // the buffers hold all the device memory in use

      // Contents: what was written below the new size is still there ("nothing copied",
      // "bytes already there keep their contents"), read with a device copy.
      b.valid = std::min(b.valid, target);
      const std::size_t bad = first_mismatch(sim, s, b.addr, b.ref.data(), b.valid);
      CHECK(bad == kEqual);
      // The new bytes are usable by work submitted after the resize.
      REQUIRE(put(sim, s, static_cast<char*>(b.addr) + b.valid, b.ref.data() + b.valid, target - b.valid) ==
              cudaSuccess);
      b.valid = target;
      // Mapped memory does not fault; the byte after the physical memory does (when still reserved).
      if (phys > 0) CHECK_FALSE(access_faults(sim, s, static_cast<char*>(b.addr) + phys - 1, true));
      if (phys < round_up(b.max, kG)) CHECK(access_faults(sim, s, static_cast<char*>(b.addr) + phys, false));
    }
    const std::size_t faults_expected = sim.faults();  // only those access_faults provoked
    bufs.clear();                                      // "~GrowableBuffer: ... unmaps and releases everything"
    const SimCounters end = sim.counters();
    CHECK(end.physical_bytes == 0);
    CHECK(end.mappings == 0);
    CHECK(end.reservations == 0);
    CHECK(sim.faults() == faults_expected);
    sim.destroy_stream(s);
  }
}

TEST_CASE("scenario growable: resize to exactly the maximum, and one byte past it", "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults());
  for (std::size_t max : {std::size_t{1}, std::size_t{511}, kG - 1, kG, kG + 1, 5 * kMiB + 3, 16 * kMiB}) {
    INFO("max_size " << max);
    GrowableBuffer g(max, gopts(sim));
    CHECK(g.resize(max, nullptr) == cudaSuccess);
    CHECK(g.size() == max);
    CHECK(g.physical_bytes() == round_up(max, kG));
    const Snapshot before(sim);
    // vmm.md: "A failed resize (beyond the maximum: cudaErrorInvalidValue ...) changes nothing".
    // The maximum is the max_size asked for (sova.h: "size > maxSize: cudaErrorInvalidValue"),
    // even where the reservation was rounded up to a granule.
    CHECK(g.resize(max + 1, nullptr) == cudaErrorInvalidValue);
    CHECK(g.resize(g.max_size() + 1, nullptr) == cudaErrorInvalidValue);
    CHECK(g.size() == max);
    CHECK(Snapshot(sim).same_live(before));
    CHECK(g.resize(0, nullptr) == cudaSuccess);
    CHECK(g.physical_bytes() == 0);
    CHECK(g.resize(0, nullptr) == cudaSuccess);  // zero again: nothing to do
  }
  CHECK(sim.counters().reservations == 0);
}

TEST_CASE("scenario growable: max_size() is the size asked for", "[vmm][growable][scenario]") {
  // growable.hpp documents the constructor as "Reserves `max_size` bytes (rounded up to the
  // granularity)" and resize as "bytes > max_size(): cudaErrorInvalidValue"; sova.h's C form
  // refuses "size > maxSize", the size asked for. The two agree only if max_size() returns the
  // size asked for, not the rounded reservation.
  SimDriver sim(quiet_faults());
  GrowableBuffer g(kG + 1, gopts(sim));
  CHECK(g.max_size() == kG + 1);
}

TEST_CASE("scenario growable: constructor errors carry the documented codes and reserve nothing",
          "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults());
  auto code_of = [&](std::size_t max, const GrowableOptions& o) -> cudaError_t {
    try {
      GrowableBuffer g(max, o);
    } catch (const Error& e) {
      return e.error();
    } catch (const OutOfMemory& e) {
      return e.error();
    }
    return cudaSuccess;
  };
  const Snapshot before(sim);
  CHECK(code_of(0, gopts(sim)) == cudaErrorInvalidValue);  // "cudaErrorInvalidValue for max_size 0"
  GrowableOptions bad_device = gopts(sim);
  bad_device.device = 1;  // the sim has one device
  CHECK(code_of(kMiB, bad_device) == cudaErrorInvalidDevice);
  bad_device.device = -1;
  CHECK(code_of(kMiB, bad_device) == cudaErrorInvalidDevice);
  GrowableOptions compressible = gopts(sim);
  compressible.compressible = true;  // the sim's default: no generic compression
  CHECK(code_of(kMiB, compressible) == cudaErrorNotSupported);
  // "cudaErrorMemoryAllocation when the VA cannot be had": sizes no address space holds, the
  // largest of which overflow when rounded up to the granularity.
  for (std::size_t huge : {std::size_t{1} << 62, std::numeric_limits<std::size_t>::max() - kG}) {
    INFO("max_size " << huge);
    CHECK(code_of(huge, gopts(sim)) == cudaErrorMemoryAllocation);
  }
  CHECK(Snapshot(sim).same_live(before));
  CHECK(sim.counters().reservations == 0);

  SimConfig no_vmm = quiet_faults();
  no_vmm.vmm_supported = false;
  SimDriver bare(no_vmm);
  CHECK(code_of(kMiB, gopts(bare)) == cudaErrorNotSupported);
  SimConfig no_numa = quiet_faults();
  no_numa.host_numa_nodes = 0;
  SimDriver no_host(no_numa);
  GrowableOptions host = gopts(no_host);
  host.host_numa_node = 0;
  CHECK(code_of(kMiB, host) == cudaErrorNotSupported);
  CHECK(bare.counters().reservations == 0);
  CHECK(no_host.counters().reservations == 0);
  // A NUMA node the host does not have: no code is documented. sova accepts it at construction
  // (as Pool does) and refuses the first growth; either way it must be an error that leaves
  // nothing behind (see the report: an error at construction would be clearer).
  GrowableOptions far_node = gopts(sim);
  far_node.host_numa_node = 5;  // the sim has one node
  try {
    GrowableBuffer g(16 * kMiB, far_node);
    CHECK(g.resize(4 * kMiB, nullptr) != cudaSuccess);
    CHECK(g.size() == 0);
    CHECK(g.physical_bytes() == 0);
    CHECK(sim.counters().host_bytes == 0);
    CHECK(sim.counters().physical_bytes == 0);
  } catch (const Error&) {
    SUCCEED("refused at construction");
  }
  CHECK(sim.counters().reservations == 0);
}

TEST_CASE("scenario growable: a max_size whose rounding overflows is cudaErrorMemoryAllocation",
          "[vmm][growable][scenario]") {
  // growable.hpp lists the constructor's codes: "cudaErrorInvalidValue for max_size 0, ...
  // cudaErrorMemoryAllocation when the VA cannot be had", as PoolOptions::va_reserve says of a
  // pool's VA whose rounding would exceed SIZE_MAX. SIZE_MAX - 1 and SIZE_MAX once gave
  // cudaErrorInvalidValue. Nothing is reserved either way.
  SimDriver sim(quiet_faults());
  for (std::size_t huge : {std::numeric_limits<std::size_t>::max() - 1, std::numeric_limits<std::size_t>::max()}) {
    INFO("max_size " << huge);
    cudaError_t code = cudaSuccess;
    try {
      GrowableBuffer g(huge, gopts(sim));
    } catch (const Error& e) {
      code = e.error();
    }
    CHECK(code == cudaErrorMemoryAllocation);
    CHECK(sim.counters().reservations == 0);
  }
}

TEST_CASE("scenario growable: a driver failure in the middle of a growth changes nothing",
          "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  GrowableBuffer g(64 * kMiB, gopts(sim, kG));  // one granule per chunk: a growth is many rounds
  REQUIRE(g.resize(3 * kMiB, s) == cudaSuccess);
  const auto ref = pattern(3 * kMiB, 77);
  REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);

  struct Case {
    const char* what;
    void (*inject)(SimDriver&);
    cudaError_t expected;
  };
  const Case cases[] = {
      {"third physical_create fails", [](SimDriver& d) { d.fail_physical_create_at(3); }, cudaErrorMemoryAllocation},
      {"second map fails", [](SimDriver& d) { d.fail_map_at(2, cudaErrorUnknown); }, cudaErrorUnknown},
      {"first set_access fails", [](SimDriver& d) { d.fail_set_access_at(1, cudaErrorUnknown); }, cudaErrorUnknown},
      {"sixth map fails", [](SimDriver& d) { d.fail_map_at(6, cudaErrorUnknown); }, cudaErrorUnknown},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": growable.hpp says \"Errors change nothing\" and returns \"else the driver's\" code");
    const Snapshot before(sim);
    c.inject(sim);
    CHECK(g.resize(20 * kMiB, s) == c.expected);
    CHECK(g.size() == 3 * kMiB);
    CHECK(g.physical_bytes() == 4 * kMiB);
    CHECK(Snapshot(sim).same_live(before));
    CHECK(first_mismatch(sim, s, g.data(), ref.data(), ref.size()) == kEqual);
    CHECK(access_faults(sim, s, static_cast<char*>(g.data()) + 4 * kMiB, false));  // nothing left mapped
  }
  REQUIRE(g.resize(20 * kMiB, s) == cudaSuccess);  // and it still grows
  CHECK(first_mismatch(sim, s, g.data(), ref.data(), ref.size()) == kEqual);
  sim.destroy_stream(s);
}

TEST_CASE("scenario growable: a driver failure in the middle of a shrink is accounted for",
          "[vmm][growable][scenario]") {
  // growable.hpp: "A shrink succeeds even when the driver refuses to unmap a chunk beyond
  // `bytes`", and physical_bytes() counts "one whose unmap of a chunk the driver refused (that
  // chunk stays mapped, counted here, and is released by a later shrink or the destructor)".
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  GrowableBuffer g(64 * kMiB, gopts(sim, kG));
  REQUIRE(g.resize(12 * kMiB, s) == cudaSuccess);
  const auto ref = pattern(12 * kMiB, 78);
  REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);
  sim.fail_unmap_at(2, cudaErrorUnknown);
  REQUIRE(g.resize(2 * kMiB, s) == cudaSuccess);
  INFO("size " << g.size() << ", physical_bytes " << g.physical_bytes());
  CHECK(g.size() == 2 * kMiB);
  CHECK(g.physical_bytes() == 4 * kMiB);  // the first 2 MiB, and the chunk whose unmap failed
  CHECK(sim.counters().physical_bytes == g.physical_bytes());  // counted as mapped, exactly
  CHECK(first_mismatch(sim, s, g.data(), ref.data(), 2 * kMiB) == kEqual);
  // A later shrink releases the chunk left mapped.
  REQUIRE(g.resize(1 * kMiB, s) == cudaSuccess);
  CHECK(g.physical_bytes() == 2 * kMiB);
  CHECK(sim.counters().physical_bytes == 2 * kMiB);
  CHECK(first_mismatch(sim, s, g.data(), ref.data(), 1 * kMiB) == kEqual);
  sim.destroy_stream(s);
}

TEST_CASE(
    "scenario growable: after an unmap failure in a shrink the buffer still grows, keeps its bytes and "
    "releases everything",
    "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  {
    GrowableBuffer g(64 * kMiB, gopts(sim, kG));
    REQUIRE(g.resize(12 * kMiB, s) == cudaSuccess);
    const auto ref = pattern(12 * kMiB, 79);
    REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);
    sim.fail_unmap_at(2, cudaErrorUnknown);
    (void)g.resize(2 * kMiB, s);  // whatever it says (see the test above)
    REQUIRE(g.resize(12 * kMiB, s) == cudaSuccess);
    CHECK(g.physical_bytes() == 12 * kMiB);
    CHECK(sim.counters().physical_bytes == 12 * kMiB);
    CHECK(first_mismatch(sim, s, g.data(), ref.data(), 2 * kMiB) == kEqual);
    REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);  // every byte mapped again
    CHECK(first_mismatch(sim, s, g.data(), ref.data(), ref.size()) == kEqual);
    CHECK(sim.faults() == 0);
  }
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().mappings == 0);
  CHECK(sim.counters().reservations == 0);
  sim.destroy_stream(s);
}

TEST_CASE("scenario growable: buffers compete for the device; a refused growth succeeds once memory is back",
          "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults(64 * kMiB));
  cudaStream_t s = sim.create_stream();
  GrowableBuffer a(64 * kMiB, gopts(sim, 4 * kMiB));
  GrowableBuffer b(64 * kMiB, gopts(sim, 4 * kMiB));
  REQUIRE(a.resize(40 * kMiB, s) == cudaSuccess);
  const auto ref = pattern(40 * kMiB, 9);
  REQUIRE(put(sim, s, a.data(), ref.data(), ref.size()) == cudaSuccess);
  REQUIRE(b.resize(10 * kMiB, s) == cudaSuccess);
  const Snapshot before(sim);
  CHECK(b.resize(30 * kMiB, s) == cudaErrorMemoryAllocation);  // 40 + 30 > 64
  CHECK(b.size() == 10 * kMiB);
  CHECK(b.physical_bytes() == 10 * kMiB);
  CHECK(Snapshot(sim).same_live(before));
  CHECK(b.resize(24 * kMiB, s) == cudaSuccess);  // exactly the device: 40 + 24 = 64
  CHECK(sim.counters().physical_bytes == 64 * kMiB);
  CHECK(b.resize(24 * kMiB + 1, s) == cudaErrorMemoryAllocation);
  REQUIRE(a.resize(8 * kMiB, s) == cudaSuccess);  // 4 MiB chunks: exactly 8 MiB stays
  CHECK(a.physical_bytes() == 8 * kMiB);
  CHECK(b.resize(50 * kMiB, s) == cudaSuccess);
  CHECK(first_mismatch(sim, s, a.data(), ref.data(), 8 * kMiB) == kEqual);
  sim.destroy_stream(s);
}

TEST_CASE("scenario growable: a shrink waits for the work on its stream; the destructor for the device",
          "[vmm][growable][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  cudaStream_t other = sim.create_stream();
  {
    GrowableBuffer g(32 * kMiB, gopts(sim, kG));
    REQUIRE(g.resize(16 * kMiB, s) == cudaSuccess);
    std::atomic<bool> ran{false};
    char* tail = static_cast<char*>(g.data()) + 12 * kMiB;
    sim.delay(s, std::chrono::milliseconds(30));
    sim.launch_touching(s, tail, 2 * kMiB, true, [&] {
      std::memset(tail, 5, 2 * kMiB);
      ran = true;
    });
    // growable.hpp: "Shrinking synchronizes `stream` (work on it may still touch the tail)".
    REQUIRE(g.resize(kMiB, s) == cudaSuccess);
    CHECK(ran.load());         // done before the tail went
    CHECK(sim.faults() == 0);  // and it touched mapped memory
    REQUIRE(g.resize(8 * kMiB, s) == cudaSuccess);
    std::atomic<bool> ran_other{false};
    char* p = static_cast<char*>(g.data());
    sim.delay(other, std::chrono::milliseconds(30));
    sim.launch_touching(other, p, 8 * kMiB, true, [&] {
      std::memset(p, 6, 8 * kMiB);
      ran_other = true;
    });
    // "~GrowableBuffer: Synchronizes the device, then unmaps and releases everything."
  }
  CHECK(sim.faults() == 0);
  CHECK(sim.counters().physical_bytes == 0);
  CHECK(sim.counters().mappings == 0);
  sim.destroy_stream(s);
  sim.destroy_stream(other);
}

TEST_CASE("scenario growable: a buffer on the second device takes that device's memory", "[vmm][growable][scenario]") {
  SimConfig config = quiet_faults(64 * kMiB);
  config.device_count = 2;
  SimDriver sim(config);
  cudaStream_t s1 = sim.create_stream(false, 1);
  GrowableOptions o = gopts(sim, 4 * kMiB);
  o.device = 1;
  GrowableBuffer g(128 * kMiB, o);
  std::size_t free0 = 0, free1 = 0, total = 0;
  REQUIRE(sim.memory_info(0, &free0, &total) == cudaSuccess);
  REQUIRE(sim.memory_info(1, &free1, &total) == cudaSuccess);
  REQUIRE(g.resize(40 * kMiB, s1) == cudaSuccess);
  std::size_t now0 = 0, now1 = 0;
  REQUIRE(sim.memory_info(0, &now0, &total) == cudaSuccess);
  REQUIRE(sim.memory_info(1, &now1, &total) == cudaSuccess);
  CHECK(now0 == free0);
  CHECK(now1 == free1 - 40 * kMiB);
  PhysicalProps props;
  REQUIRE(sim.properties_at(reinterpret_cast<std::uintptr_t>(g.data()), &props) == cudaSuccess);
  CHECK(props.location.type == cudaMemLocationTypeDevice);
  CHECK(props.location.id == 1);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  REQUIRE(sim.access_at(reinterpret_cast<std::uintptr_t>(g.data()), 1, &flags) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtReadWrite);
  // The device is full at 64 MiB: device 1's limit applies, not device 0's free memory.
  CHECK(g.resize(64 * kMiB + 1, s1) == cudaErrorMemoryAllocation);
  CHECK(g.size() == 40 * kMiB);
  REQUIRE(g.resize(64 * kMiB, s1) == cudaSuccess);
  const auto ref = pattern(64 * kMiB, 12);
  REQUIRE(put(sim, s1, g.data(), ref.data(), ref.size()) == cudaSuccess);
  CHECK(first_mismatch(sim, s1, g.data(), ref.data(), ref.size()) == kEqual);
  REQUIRE(g.resize(0, s1) == cudaSuccess);
  REQUIRE(sim.memory_info(1, &now1, &total) == cudaSuccess);
  CHECK(now1 == free1);
  sim.destroy_stream(s1);
}

TEST_CASE("scenario growable: compressible and host-memory buffers", "[vmm][growable][scenario]") {
  SimConfig config = quiet_faults();
  config.compression_supported = true;
  config.host_numa_nodes = 1;
  SimDriver sim(config);
  cudaStream_t s = sim.create_stream();
  {
    GrowableOptions o = gopts(sim, 4 * kMiB);
    o.compressible = true;
    GrowableBuffer g(20 * kMiB, o);
    REQUIRE(g.resize(9 * kMiB, s) == cudaSuccess);
    PhysicalProps props;
    REQUIRE(sim.properties_at(reinterpret_cast<std::uintptr_t>(g.data()), &props) == cudaSuccess);
    CHECK(props.compressible);  // "as PoolOptions::compressible": the sim grants every request
    const auto ref = pattern(9 * kMiB, 5);
    REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);
    REQUIRE(g.resize(20 * kMiB, s) == cudaSuccess);
    CHECK(first_mismatch(sim, s, g.data(), ref.data(), ref.size()) == kEqual);
  }
  {
    GrowableOptions o = gopts(sim, 4 * kMiB);
    o.host_numa_node = 0;
    GrowableBuffer g(20 * kMiB, o);
    REQUIRE(g.resize(6 * kMiB, s) == cudaSuccess);
    // Pinned host memory: counted against the host, not the device.
    CHECK(sim.counters().host_bytes == g.physical_bytes());
    CHECK(sim.counters().physical_bytes == 0);
    PhysicalProps props;
    REQUIRE(sim.properties_at(reinterpret_cast<std::uintptr_t>(g.data()), &props) == cudaSuccess);
    CHECK(props.location.type == cudaMemLocationTypeHostNuma);
    CHECK(props.location.id == 0);
    const auto ref = pattern(6 * kMiB, 6);
    REQUIRE(put(sim, s, g.data(), ref.data(), ref.size()) == cudaSuccess);
    REQUIRE(g.resize(18 * kMiB, s) == cudaSuccess);
    CHECK(first_mismatch(sim, s, g.data(), ref.data(), ref.size()) == kEqual);
    REQUIRE(g.resize(0, s) == cudaSuccess);
    CHECK(sim.counters().host_bytes == 0);
  }
  CHECK(sim.counters().reservations == 0);
  sim.destroy_stream(s);
}

TEST_CASE("scenario growable: interleaved with a pool's allocations, frees and trims on one device",
          "[vmm][growable][pool][scenario]") {
  for (std::uint64_t seed : scenario_seeds({11, 12})) {
    INFO("seed " << seed << " (replay: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {
      return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    const std::size_t total = std::size_t{192} << 20;
    SimDriver sim(quiet_faults(total));
    cudaStream_t s = sim.create_stream();
    Pool pool(popts(sim));
    GrowableBuffer g(96 * kMiB, gopts(sim, 8 * kMiB));
    const auto ref = pattern(96 * kMiB, seed);
    std::size_t valid = 0;
    struct Live {
      void* p;
      std::size_t n;
      unsigned char byte;
    };
    std::vector<Live> live;
    for (int step = 0; step < 60; ++step) {
      INFO("step " << step);
      switch (pick(0, 4)) {
        case 0: {  // allocate from the pool
          const std::size_t n = pick(1, 12 * kMiB);
          void* p = nullptr;
          const cudaError_t e = pool.try_allocate(&p, n, s);
          if (e == cudaErrorMemoryAllocation) break;  // the device may be full
          REQUIRE(e == cudaSuccess);
          const unsigned char byte = static_cast<unsigned char>(pick(1, 255));
          std::vector<unsigned char> fill(n, byte);
          REQUIRE(put(sim, s, p, fill.data(), n) == cudaSuccess);
          live.push_back({p, n, byte});
          break;
        }
        case 1:  // free a block
          if (!live.empty()) {
            const std::size_t i = pick(0, live.size() - 1);
            REQUIRE(pool.try_deallocate(live[i].p, s) == cudaSuccess);
            live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
          }
          break;
        case 2:  // trim the pool
          REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
          pool.stream_synchronized(s);
          pool.trim_to(pick(0, 1) == 0 ? 0 : pick(0, 32 * kMiB));
          break;
        default: {  // resize the buffer
          const std::size_t target = pick(0, 96 * kMiB);
          const cudaError_t e = g.resize(target, s);
          if (e == cudaErrorMemoryAllocation) {
            // Possible only when the device cannot hold it beside the pool.
            CHECK(sim.counters().physical_bytes + round_up(target, kG) - g.physical_bytes() > total - 0);
            break;
          }
          REQUIRE(e == cudaSuccess);
          valid = std::min(valid, target);
          CHECK(first_mismatch(sim, s, g.data(), ref.data(), valid) == kEqual);
          REQUIRE(put(sim, s, static_cast<char*>(g.data()) + valid, ref.data() + valid, target - valid) == cudaSuccess);
          valid = target;
        }
      }
      // The pool's blocks and the buffer never share memory: each holds what was written
      // (every block checked every 8 steps, the buffer at every step).
      if (step % 8 == 7)
        for (const Live& b : live) {
          std::vector<unsigned char> want(b.n, b.byte);
          CHECK(first_mismatch(sim, s, b.p, want.data(), b.n) == kEqual);
        }
      CHECK(first_mismatch(sim, s, g.data(), ref.data(), valid) == kEqual);
      CHECK(sim.counters().physical_bytes == g.physical_bytes() + pool.stats().reserved_current);
    }
    for (const Live& b : live) pool.deallocate(b.p, s);
    CHECK(sim.faults() == 0);
    sim.stream_synchronize(s);
    sim.destroy_stream(s);
  }
}

// ---------------------------------------------------------------------------
// Aliases
// ---------------------------------------------------------------------------

TEST_CASE("scenario alias: random blocks with read-write and read-only aliases, destroyed in random order",
          "[vmm][alias][scenario]") {
  for (std::uint64_t seed : scenario_seeds({21, 22, 23, 24})) {
    INFO("seed " << seed << " (replay: SOVA_SCENARIO_SEED=" << seed << ")");
    std::mt19937_64 rng(seed);
    auto pick = [&rng](std::size_t lo, std::size_t hi) {
      return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
    };
    SimDriver sim(quiet_faults(std::size_t{512} << 20));
    cudaStream_t s = sim.create_stream();
    Pool pool(popts(sim));
    struct Block {
      void* p;
      std::size_t n;
      std::vector<unsigned char> data;
    };
    struct View {
      std::unique_ptr<BlockAlias> alias;
      std::size_t block;
      bool writable;
    };
    std::vector<Block> blocks;
    std::vector<View> views;
    for (int round = 0; round < 5; ++round) {
      // A few new blocks of sizes from a byte to several chunks.
      for (std::size_t k = pick(1, 5); k > 0; --k) {
        std::size_t n = 0;
        switch (pick(0, 2)) {
          case 0: n = pick(1, 8192); break;
          case 1: n = pick(1, 4 * kMiB); break;
          default: n = pick(31 * kMiB, 45 * kMiB); break;  // spans chunks (32 MiB by default)
        }
        void* p = pool.allocate(n, s);
        Block b{p, n, pattern(n, seed * 1000 + blocks.size() + round * 100)};
        REQUIRE(put(sim, s, p, b.data.data(), n) == cudaSuccess);
        blocks.push_back(std::move(b));
      }
      // Aliases of some of them; an alias adds no physical memory and no pool memory.
      for (std::size_t k = pick(1, 4); k > 0 && !blocks.empty(); --k) {
        const std::size_t bi = pick(0, blocks.size() - 1);
        const bool writable = pick(0, 1) == 0;
        const std::size_t physical = sim.counters().physical_bytes;
        const PoolStats st = pool.stats();
        views.push_back(
            {std::make_unique<BlockAlias>(pool, blocks[bi].p,
                                          writable ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtRead),
             bi, writable});
        const BlockAlias& a = *views.back().alias;
        INFO("alias of block " << bi << " (" << blocks[bi].n << " bytes), " << (writable ? "rw" : "ro"));
        CHECK(a.block() == blocks[bi].p);
        CHECK(a.size() == blocks[bi].n);
        CHECK(a.data() != blocks[bi].p);
        CHECK(sim.counters().physical_bytes == physical);
        CHECK(pool.stats().reserved_current == st.reserved_current);
        CHECK(pool.stats().used_current == st.used_current);
        CHECK(pool.stats().live_blocks == st.live_blocks);
      }
      // No alias overlaps a block or another alias: "in a VA range of its own".
      for (std::size_t i = 0; i < views.size(); ++i) {
        const auto* a = static_cast<const char*>(views[i].alias->data());
        const std::size_t an = views[i].alias->size();
        CHECK_FALSE(pool.contains(a));
        for (std::size_t j = i + 1; j < views.size(); ++j) {
          const auto* b = static_cast<const char*>(views[j].alias->data());
          CHECK((a + an <= b || b + views[j].alias->size() <= a));
        }
      }
      // Every view reads what the block holds; a read-write view writes the block;
      // a read-only view refuses writes (a device fault, the block unchanged).
      for (View& v : views) {
        Block& b = blocks[v.block];
        INFO("view of block " << v.block << " (" << b.n << " bytes), " << (v.writable ? "rw" : "ro"));
        CHECK(first_mismatch(sim, s, v.alias->data(), b.data.data(), b.n) == kEqual);
        if (v.writable) {
          b.data = pattern(b.n, rng());
          REQUIRE(put(sim, s, v.alias->data(), b.data.data(), b.n) == cudaSuccess);
          CHECK(first_mismatch(sim, s, b.p, b.data.data(), b.n) == kEqual);
        } else {
          CHECK(access_faults(sim, s, v.alias->data(), true));
          CHECK(access_faults(sim, s, static_cast<char*>(v.alias->data()) + b.n - 1, true));
          CHECK_FALSE(access_faults(sim, s, static_cast<char*>(v.alias->data()) + b.n - 1, false));
          CHECK(first_mismatch(sim, s, b.p, b.data.data(), b.n) == kEqual);
        }
      }
      // Destroy some aliases in random order, then free some blocks with no alias left,
      // then trim: aliases of live blocks keep seeing them.
      std::shuffle(views.begin(), views.end(), rng);
      views.resize(pick(0, views.size()));
      std::vector<bool> aliased(blocks.size(), false);
      for (const View& v : views) aliased[v.block] = true;
      for (std::size_t i = blocks.size(); i-- > 0;) {
        if (aliased[i] || pick(0, 1) == 0) continue;
        pool.deallocate(blocks[i].p, s);
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
        for (View& v : views)
          if (v.block > i) --v.block;
      }
      REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
      pool.stream_synchronized(s);
      pool.trim_to(0);
      for (View& v : views)
        CHECK(first_mismatch(sim, s, v.alias->data(), blocks[v.block].data.data(), blocks[v.block].n) == kEqual);
    }
    views.clear();
    // The expected faults were provoked by the read-only writes; count them out.
    for (Block& b : blocks) {
      CHECK(first_mismatch(sim, s, b.p, b.data.data(), b.n) == kEqual);
      pool.deallocate(b.p, s);
    }
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    pool.stream_synchronized(s);
    pool.trim_to(0);
    CHECK(sim.counters().physical_bytes == 0);
    CHECK(sim.counters().mappings == 0);
    CHECK(sim.counters().reservations == 1);  // the pool's own
    pool.check_invariants();
    sim.destroy_stream(s);
  }
}

TEST_CASE("scenario alias: bad arguments are refused with cudaErrorInvalidValue and change nothing",
          "[vmm][alias][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  Pool pool(popts(sim));
  Pool other(popts(sim));
  void* p = pool.allocate(5 * kMiB, s);
  void* freed = pool.allocate(kMiB, s);
  pool.deallocate(freed, s);
  void* theirs = other.allocate(kMiB, s);
  GrowableBuffer g(8 * kMiB, gopts(sim));
  REQUIRE(g.resize(4 * kMiB, s) == cudaSuccess);
  int on_stack = 0;
  BlockAlias good(pool, p);

  const Snapshot before(sim);
  const PoolStats st = pool.stats();
  auto code_of = [&](void* ptr, cudaMemAccessFlags flags) -> cudaError_t {
    try {
      BlockAlias a(pool, ptr, flags);
    } catch (const Error& e) {
      return e.error();
    }
    return cudaSuccess;
  };
  const auto rw = cudaMemAccessFlagsProtReadWrite;
  // alias.hpp: "cudaErrorInvalidValue for anything but a live block's start or an access
  // other than read / read-write".
  CHECK(code_of(nullptr, rw) == cudaErrorInvalidValue);
  CHECK(code_of(static_cast<char*>(p) + 512, rw) == cudaErrorInvalidValue);       // interior
  CHECK(code_of(static_cast<char*>(p) + 5 * kMiB, rw) == cudaErrorInvalidValue);  // one past the end
  CHECK(code_of(freed, rw) == cudaErrorInvalidValue);                             // freed
  CHECK(code_of(theirs, rw) == cudaErrorInvalidValue);                            // another pool's block
  CHECK(code_of(g.data(), rw) == cudaErrorInvalidValue);                          // a growable buffer
  CHECK(code_of(good.data(), rw) == cudaErrorInvalidValue);                       // an alias is no block
  CHECK(code_of(&on_stack, rw) == cudaErrorInvalidValue);                         // host memory
  CHECK(code_of(p, cudaMemAccessFlagsProtNone) == cudaErrorInvalidValue);
  CHECK(code_of(p, static_cast<cudaMemAccessFlags>(2)) == cudaErrorInvalidValue);
  CHECK(code_of(p, static_cast<cudaMemAccessFlags>(7)) == cudaErrorInvalidValue);
  CHECK(code_of(p, static_cast<cudaMemAccessFlags>(-1)) == cudaErrorInvalidValue);
  CHECK(Snapshot(sim).same_live(before));
  CHECK(pool.stats().reserved_current == st.reserved_current);
  CHECK(pool.stats().used_current == st.used_current);
  CHECK(pool.stats().live_blocks == st.live_blocks);
  CHECK(pool.block_size(p) == 5 * kMiB);
  other.deallocate(theirs, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

TEST_CASE("scenario alias: a failing driver call leaves nothing mapped", "[vmm][alias][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  PoolOptions o = popts(sim);
  o.max_chunk = 4 * kMiB;  // a block over several chunks: an alias maps each
  Pool pool(o);
  void* before_block = pool.allocate(kMiB, s);
  void* p = pool.allocate(14 * kMiB, s);
  const Snapshot before(sim);
  struct Case {
    const char* what;
    void (*inject)(SimDriver&);
  };
  const Case cases[] = {
      {"second map fails", [](SimDriver& d) { d.fail_map_at(2); }},
      {"third map fails", [](SimDriver& d) { d.fail_map_at(3); }},
      {"first set_access fails", [](SimDriver& d) { d.fail_set_access_at(1); }},
      {"fourth map fails", [](SimDriver& d) { d.fail_map_at(4); }},
  };
  for (const Case& c : cases) {
    INFO(c.what << ": alias.hpp says \"the driver's error otherwise (nothing is left mapped then)\"");
    cudaError_t code = cudaSuccess;
    c.inject(sim);
    try {
      BlockAlias a(pool, p);
    } catch (const Error& e) {
      code = e.error();
    }
    CHECK(code == cudaErrorUnknown);
    CHECK(Snapshot(sim).same_live(before));
  }
  BlockAlias a(pool, p);  // and it works afterwards
  CHECK(a.size() == 14 * kMiB);
  const auto ref = pattern(14 * kMiB, 1);
  REQUIRE(put(sim, s, a.data(), ref.data(), ref.size()) == cudaSuccess);
  CHECK(first_mismatch(sim, s, p, ref.data(), ref.size()) == kEqual);
  (void)before_block;
  sim.destroy_stream(s);
}

TEST_CASE("scenario alias: two aliases of one block, destroyed one after the other; the destructor waits",
          "[vmm][alias][scenario]") {
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  Pool pool(popts(sim));
  void* pad = pool.allocate(3 * kMiB, s);  // the block does not start a chunk
  void* p = pool.allocate(40 * kMiB, s);   // and spans chunks
  const std::size_t mappings = sim.counters().mappings;
  const std::size_t reservations = sim.counters().reservations;
  auto ro = std::make_unique<BlockAlias>(pool, p, cudaMemAccessFlagsProtRead);
  auto rw = std::make_unique<BlockAlias>(pool, p, cudaMemAccessFlagsProtReadWrite);
  CHECK(ro->data() != rw->data());
  const auto ref = pattern(40 * kMiB, 3);
  REQUIRE(put(sim, s, rw->data(), ref.data(), ref.size()) == cudaSuccess);
  CHECK(first_mismatch(sim, s, ro->data(), ref.data(), ref.size()) == kEqual);
  CHECK(first_mismatch(sim, s, p, ref.data(), ref.size()) == kEqual);
  // The read-write alias's destructor "synchronizes the pool's device": work queued on a
  // stream through it is finished before the view is unmapped.
  std::atomic<bool> ran{false};
  char* w = static_cast<char*>(rw->data()) + 39 * kMiB;
  sim.delay(s, std::chrono::milliseconds(30));
  sim.launch_touching(s, w, kMiB, true, [&] {
    std::memset(w, 0x5A, kMiB);
    ran = true;
  });
  rw.reset();
  CHECK(ran.load());
  CHECK(sim.faults() == 0);
  // The other alias and the block are untouched by its going.
  std::vector<unsigned char> want = ref;
  std::memset(want.data() + 39 * kMiB, 0x5A, kMiB);
  CHECK(first_mismatch(sim, s, ro->data(), want.data(), want.size()) == kEqual);
  CHECK(first_mismatch(sim, s, p, want.data(), want.size()) == kEqual);
  ro.reset();
  CHECK(sim.counters().mappings == mappings);
  CHECK(sim.counters().reservations == reservations);
  pool.deallocate(p, s);
  pool.deallocate(pad, s);
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

TEST_CASE("scenario alias: an alias of a block whose chunks were remapped from freed memory",
          "[vmm][alias][scenario]") {
  // The pool moves free physical chunks under new blocks (docs/policies.md, "Physical
  // remapping"); an alias maps "the physical chunks under a block", so it must find the moved
  // ones: a write through the alias is read through the block, and the freed block's old
  // neighbour keeps its bytes.
  SimDriver sim(quiet_faults());
  cudaStream_t s = sim.create_stream();
  PoolOptions o = popts(sim);
  o.max_chunk = kG;
  Pool pool(o);
  void* keep = pool.allocate(4 * kMiB, s);
  void* a = pool.allocate(8 * kMiB, s);
  void* fence = pool.allocate(2 * kMiB, s);
  const auto keep_ref = pattern(4 * kMiB, 90);
  REQUIRE(put(sim, s, keep, keep_ref.data(), keep_ref.size()) == cudaSuccess);
  pool.deallocate(a, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  void* c = pool.allocate(16 * kMiB, s);  // larger than the hole: placed after, backed partly by a's chunks
  const PoolStats st = pool.stats();
  INFO("chunks remapped so far: " << st.chunks_remapped);
  {
    BlockAlias view(pool, c);
    const auto ref = pattern(16 * kMiB, 91);
    REQUIRE(put(sim, s, view.data(), ref.data(), ref.size()) == cudaSuccess);
    CHECK(first_mismatch(sim, s, c, ref.data(), ref.size()) == kEqual);
    const auto ref2 = pattern(16 * kMiB, 92);
    REQUIRE(put(sim, s, c, ref2.data(), ref2.size()) == cudaSuccess);
    CHECK(first_mismatch(sim, s, view.data(), ref2.data(), ref2.size()) == kEqual);
  }
  CHECK(first_mismatch(sim, s, keep, keep_ref.data(), keep_ref.size()) == kEqual);
  CHECK(sim.faults() == 0);
  pool.deallocate(c, s);
  pool.deallocate(fence, s);
  pool.deallocate(keep, s);
  pool.check_invariants();
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}

// ---------------------------------------------------------------------------
// Compressible and host memory pools
// ---------------------------------------------------------------------------

TEST_CASE("scenario pools: compressible and host memory pools, and their refusals", "[vmm][scenario]") {
  {
    SimDriver sim(quiet_faults());  // no compression
    PoolOptions o = popts(sim);
    o.compressible = true;
    cudaError_t code = cudaSuccess;
    try {
      Pool pool(o);
    } catch (const Error& e) {
      code = e.error();
    }
    CHECK(code == cudaErrorNotSupported);
    CHECK(sim.counters().reservations == 0);  // vmm.md: "(nothing is reserved)"
  }
  {
    SimConfig config = quiet_faults();
    config.host_numa_nodes = 0;
    SimDriver sim(config);
    PoolOptions o = popts(sim);
    o.host_numa_node = 0;
    cudaError_t code = cudaSuccess;
    try {
      Pool pool(o);
    } catch (const Error& e) {
      code = e.error();
    }
    CHECK(code == cudaErrorNotSupported);
    CHECK(sim.counters().reservations == 0);
  }
  SimConfig config = quiet_faults();
  config.compression_supported = true;
  config.host_numa_nodes = 1;
  SimDriver sim(config);
  cudaStream_t s = sim.create_stream();
  {
    PoolOptions o = popts(sim);
    o.compressible = true;
    Pool pool(o);
    void* p = pool.allocate(3 * kMiB, s);
    PhysicalProps props;
    REQUIRE(pool.properties(p, &props) == cudaSuccess);
    CHECK(props.compressible);
    CHECK(props.location.type == cudaMemLocationTypeDevice);
    CHECK(pool.properties(static_cast<char*>(p) + 512, &props) == cudaErrorInvalidValue);
    {
      BlockAlias a(pool, p);  // an alias of compressed memory reads the same bytes
      const auto ref = pattern(3 * kMiB, 8);
      REQUIRE(put(sim, s, p, ref.data(), ref.size()) == cudaSuccess);
      CHECK(first_mismatch(sim, s, a.data(), ref.data(), ref.size()) == kEqual);
      REQUIRE(sim.properties_at(reinterpret_cast<std::uintptr_t>(a.data()), &props) == cudaSuccess);
      CHECK(props.compressible);
    }  // vmm.md: "Destroy it before freeing the block"
    pool.deallocate(p, s);
  }
  {
    PoolOptions o = popts(sim);
    o.host_numa_node = 0;
    Pool pool(o);
    const std::size_t device_before = sim.counters().physical_bytes;
    void* p = pool.allocate(5 * kMiB, s);
    CHECK(sim.counters().physical_bytes == device_before);  // "counts against host memory"
    CHECK(sim.counters().host_bytes >= 5 * kMiB);
    CHECK(sim.counters().host_bytes == pool.stats().reserved_current);
    PhysicalProps props;
    REQUIRE(pool.properties(p, &props) == cudaSuccess);
    CHECK(props.location.type == cudaMemLocationTypeHostNuma);
    {
      BlockAlias a(pool, p, cudaMemAccessFlagsProtRead);
      const auto ref = pattern(5 * kMiB, 9);
      REQUIRE(put(sim, s, p, ref.data(), ref.size()) == cudaSuccess);
      CHECK(first_mismatch(sim, s, a.data(), ref.data(), ref.size()) == kEqual);
    }
    pool.deallocate(p, s);
    sim.stream_synchronize(s);
    pool.stream_synchronized(s);
    pool.trim_to(0);
    CHECK(sim.counters().host_bytes == 0);
  }
  sim.destroy_stream(s);
}
