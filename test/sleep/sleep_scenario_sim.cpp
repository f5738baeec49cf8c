// The randomized sleep and wake scenario on the simulation
// (sleep_scenario.hpp): a SimDriver of its own per program, whose memory is
// the host's, so that fills and checks are host writes and reads, made at
// once (the simulated stream's work done).
#include "sleep/sleep_scenario.hpp"

#include <sova/sim.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <utility>

namespace sova::sleep_test {
namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

std::uint64_t word(std::uint64_t seed, std::size_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + i;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  return z ^ (z >> 27);
}

class SimSleepDevice final : public SleepScenarioDevice {
 public:
  explicit SimSleepDevice(std::uint64_t seed) : sim_(config(seed)) {}

  Driver& driver() override { return sim_; }
  std::size_t scale() const override { return 1; }

  void fill(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t) override {
    auto* p = static_cast<unsigned char*>(ptr);
    for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
      const std::uint64_t w = word(seed, i);
      std::memcpy(p + i, &w, 8);
    }
    for (std::size_t i = bytes / 8 * 8; i < bytes; ++i) p[i] = static_cast<unsigned char>(seed + i);
  }

  void count_wrong(const void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t) override {
    const auto* p = static_cast<const unsigned char*>(ptr);
    for (std::size_t i = 0; i + 8 <= bytes; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w != word(seed, i)) wrong_ += 8;
    }
    for (std::size_t i = bytes / 8 * 8; i < bytes; ++i) {
      if (p[i] != static_cast<unsigned char>(seed + i)) ++wrong_;
    }
  }

  std::uint64_t take_wrong() override { return std::exchange(wrong_, 0); }

  void touch(const void* ptr, std::size_t bytes, cudaStream_t stream) override {
    sim_.launch_touching(stream, ptr, bytes, false, nullptr);
  }

  void hold(cudaStream_t) override { sim_.delay_copies(std::chrono::microseconds(200)); }
  void end_hold() override { sim_.delay_copies(std::chrono::microseconds(0)); }

  bool injects_failures() const override { return true; }

  void fail_at(FailingCall call, int nth) override {
    switch (call) {
      case FailingCall::unmap: sim_.fail_unmap_at(nth); break;
      case FailingCall::memcpy: sim_.fail_memcpy_at(nth); break;
      case FailingCall::host_register: sim_.fail_host_register_at(nth); break;
      case FailingCall::host_map: sim_.fail_host_map_at(nth); break;
      case FailingCall::physical_create: sim_.fail_physical_create_at(nth); break;
      case FailingCall::map: sim_.fail_map_at(nth); break;
      case FailingCall::set_access: sim_.fail_set_access_at(nth); break;
    }
  }

  void disarm() override {
    sim_.fail_unmap_at(0);
    sim_.fail_memcpy_at(0);
    sim_.fail_host_register_at(0);
    sim_.fail_host_map_at(0);
    sim_.fail_physical_create_at(0);
    sim_.fail_map_at(0);
    sim_.fail_set_access_at(0);
  }

  std::string fault() override { return sim_.faults() != 0 ? sim_.first_fault() : std::string(); }

  bool physical_bytes(std::size_t* out) override {
    *out = sim_.counters().physical_bytes;
    return true;
  }

  std::string leftovers() override {
    const SimCounters left = sim_.counters();
    if (left.physical_bytes != 0 || left.mappings != 0 || left.reservations != 0 || left.pinned_host_bytes != 0 ||
        left.host_mapped_bytes != 0) {
      return "memory left with the driver";
    }
    return {};
  }

 private:
  static SimConfig config(std::uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x5EEDC0F1Full);
    SimConfig c;
    c.total_memory = 64 * MiB;
    c.granularity = (std::size_t{4} << std::uniform_int_distribution<int>(0, 4)(rng)) * KiB;  // 4 to 64 KiB
    c.abort_on_fault = false;
    return c;
  }

  SimDriver sim_;
  std::uint64_t wrong_ = 0;
};

}  // namespace

std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts) {
  SimSleepDevice device(seed);
  return run_sleep_scenario(seed, counts, device);
}

}  // namespace sova::sleep_test
