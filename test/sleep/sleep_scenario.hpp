// A randomized sleep and wake scenario: several pools, blocks of mixed sizes
// (the RL loop's 1 GiB, 256 MiB, 96 MiB + 4100 B, 4 KiB, 777 B, 3 MiB,
// 64 MiB, scaled to the device), frees before the sleep and while asleep,
// backup and discard, trims, and another stream's allocations racing the
// restore (made while the wake's stream still holds the restore back).
// Every step checks what the pool promises: no device fault (a copy or
// kernel touching memory not mapped), every kept byte back after wake, and
// every block handed out after wake keeping what its stream wrote.
//
// One generator, two devices (SleepScenarioDevice): the simulation
// (test_sleep_scenarios.cpp, suite 'sim'), which also injects driver
// failures into sleep and wake and counts the device's physical bytes, and
// a GPU (test/gpu/test_scenario_sleep_programs.cpp, suite 'gpu', also run
// under compute-sanitizer's memcheck).
#pragma once

#include <sova/driver.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace sova::sleep_test {

/// What one program did, to tell programs that exercised the paths from
/// programs that did nothing.
struct ScenarioCounts {
  long sleeps = 0, failed_sleeps = 0, cut_short_sleeps = 0, wakes = 0, failed_wakes = 0, frees_asleep = 0,
       trims_asleep = 0, reuses_after_wake = 0, trims_after_wake = 0, late_restores = 0, blocks_checked = 0;
};

/// Driver calls a device can be told to fail (the simulation can).
enum class FailingCall { unmap, memcpy, host_register, host_map, physical_create, map, set_access };

/// What the scenario needs from a device. Work is stream-ordered: fill,
/// count_wrong and touch are enqueued on the stream, as kernels.
class SleepScenarioDevice {
 public:
  virtual ~SleepScenarioDevice() = default;
  virtual Driver& driver() = 0;
  /// How much larger than the simulation's the sizes are (the granule's ratio, within reason).
  virtual std::size_t scale() const = 0;
  /// Writes seed's pattern (a different value at every byte) into [ptr, ptr + bytes).
  virtual void fill(void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) = 0;
  /// Counts the bytes of [ptr, ptr + bytes) not holding seed's pattern; read by take_wrong().
  virtual void count_wrong(const void* ptr, std::size_t bytes, std::uint64_t seed, cudaStream_t stream) = 0;
  /// The bytes counted wrong since the last call (synchronize the streams first).
  virtual std::uint64_t take_wrong() = 0;
  /// A kernel reading [ptr, ptr + bytes): a device fault where it is not mapped.
  virtual void touch(const void* ptr, std::size_t bytes, cudaStream_t stream) = 0;
  /// Holds back the copies enqueued on `stream` next (a wake's restore), so
  /// that what the program does right after wake runs before them;
  /// end_hold() after the wake.
  virtual void hold(cudaStream_t stream) = 0;
  virtual void end_hold() = 0;
  /// Whether fail_at() does anything (the GPU cannot fail calls on purpose).
  virtual bool injects_failures() const = 0;
  /// Fails the `nth` next `call` (1: the next); disarm() cancels what is left.
  virtual void fail_at(FailingCall call, int nth) = 0;
  virtual void disarm() = 0;
  /// A device fault seen so far ("": none; on a GPU a fault shows as a failed synchronize).
  virtual std::string fault() = 0;
  /// The device's physical bytes held for allocations, where the device
  /// counts them (false: it cannot tell).
  virtual bool physical_bytes(std::size_t* out) = 0;
  /// What is left with the device once every pool is destroyed ("": nothing).
  virtual std::string leftovers() = 0;
};

/// Runs program `seed` on `device`; returns "" when every promise held, else
/// what broke (the first). Adds what it did to `counts`.
std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts, SleepScenarioDevice& device);

/// Runs program `seed` on a simulation of its own (64 MiB, a granule of 4 to
/// 64 KiB chosen by the seed, driver failures injected).
std::string run_sleep_scenario(std::uint64_t seed, ScenarioCounts& counts);

}  // namespace sova::sleep_test
