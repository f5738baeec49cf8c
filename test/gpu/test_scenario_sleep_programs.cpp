// [scenario] Hundreds of randomized sleep and wake programs on a GPU: the
// generator of test/sleep/sleep_scenario.hpp (several pools, the RL loop's
// sizes, frees before the sleep and while asleep, backup and discard, trims,
// another stream's allocations and a trim while the wake's stream still holds
// the restore back behind a kernel), each kept byte checked by a kernel after
// every wake. The simulation runs the same programs in CI, with driver
// failures injected; here the copies, kernels and unmaps are real, and
// compute-sanitizer's memcheck sees every access (tools/device/gpu-suite.sh).
// SOVA_SLEEP_PROGRAMS sets how many (default 200). Suite 'gpu' (one GPU).
#include "gpu/scenario_util.hpp"
#include "sleep/sleep_scenario.hpp"
#include "support/catch.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <string>

using namespace sova::sleep_test;

namespace {

/// Device 0 of the machine, through the CUDA driver sova uses.
class GpuSleepDevice final : public SleepScenarioDevice {
 public:
  GpuSleepDevice() : wrong_(1) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, sizeof *touched_) == cudaSuccess);
    touched_ = static_cast<unsigned long long*>(p);
  }
  ~GpuSleepDevice() override { (void)cudaFree(touched_); }
  GpuSleepDevice(const GpuSleepDevice&) = delete;
  GpuSleepDevice& operator=(const GpuSleepDevice&) = delete;

  sova::Driver& driver() override { return sova::cuda_driver(); }
  /// The simulation's 4 KiB granule is a GPU's 2 MiB over 512; over 32 here,
  /// so that a program stays within a second or two (pools of up to 96 MiB).
  std::size_t scale() const override { return 32; }

  void fill(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) override {
    sova::scenario::fill(0, ptr, bytes, tag(seed), stream);
  }
  void count_wrong(const void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) override {
    sova::scenario::count_wrong(0, ptr, bytes, tag(seed), wrong_.slot(0), stream);
  }
  std::uint64_t take_wrong() override {
    const std::uint64_t wrong = wrong_.read(0);
    wrong_.zero();
    return wrong;
  }
  /// A read of every byte (its count of no interest): an illegal address,
  /// and memcheck's report, where not mapped. Nearly every word counts as
  /// wrong here: the count goes to device memory, since a million atomics
  /// on the host's counters over the link would take a second a block.
  void touch(const void* ptr, std::size_t bytes, cudaStream_t stream) override {
    sova::scenario::count_wrong(0, ptr, bytes, 0, touched_, stream);
  }
  /// 2 ms of a kernel on the wake's stream: its restore runs after what the
  /// program does next on the host and on the other stream.
  void hold(cudaStream_t stream) override { sova::scenario::busy(0, stream, 2000); }
  void end_hold() override {}

  bool injects_failures() const override { return false; }
  void fail_at(FailingCall, int) override {}
  void disarm() override {}
  /// A fault on a GPU is a sticky error: the scenario's next synchronize fails.
  std::string fault() override { return {}; }
  bool physical_bytes(std::size_t*) override { return false; }
  std::string leftovers() override { return {}; }

 private:
  static std::uint32_t tag(std::uint64_t seed) { return static_cast<std::uint32_t>(seed * 0x9E3779B1u); }

  sova::scenario::Counters wrong_;        ///< bytes counted wrong
  unsigned long long* touched_ = nullptr;  ///< touch()'s counts, in device memory, never read
};

int programs() {
  const char* env = std::getenv("SOVA_SLEEP_PROGRAMS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : 200;
}

}  // namespace

TEST_CASE("scenario: randomized sleep and wake programs on the GPU keep every kept byte",
          "[scenario][sleep][programs]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // the primary context, before the free memory is read
  const std::size_t free_before = sova::scenario::free_memory(0);
  constexpr std::uint64_t kFirstSeed = 0x51EE9;  // the simulation's programs, at the GPU's scale
  const int n = programs();
  GpuSleepDevice device;
  ScenarioCounts counts;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t seed = kFirstSeed + static_cast<std::uint64_t>(i);
    const std::string broken = run_sleep_scenario(seed, counts, device);
    INFO("program seed " << seed);
    REQUIRE(broken == "");
  }
  WARN("programs " << n << ": sleeps " << counts.sleeps << ", wakes " << counts.wakes << " (" << counts.late_restores
                   << " with the restore held back), frees while asleep " << counts.frees_asleep
                   << ", trims while asleep " << counts.trims_asleep << ", reuses right after wake "
                   << counts.reuses_after_wake << ", trims right after wake " << counts.trims_after_wake
                   << ", blocks checked " << counts.blocks_checked);
  CHECK(counts.wakes > n / 2);
  CHECK(counts.frees_asleep > 0);
  CHECK(counts.trims_asleep > 0);
  CHECK(counts.reuses_after_wake > 0);
  CHECK(counts.trims_after_wake > 0);
  CHECK(counts.late_restores > 0);
  CHECK(counts.blocks_checked > 0);
  // Every pool destroyed: the device's memory is back (within what the
  // runtime may keep for its own streams and events).
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(sova::scenario::free_memory(0) + 64 * sova::scenario::kMiB >= free_before);
}
