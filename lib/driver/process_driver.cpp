// The process driver: chosen once (SOVA_DRIVER, or set_process_driver), then
// locked when the C API creates its first pool.
#include "driver/process_driver.hpp"

#include "base/no_destroy.hpp"

#include <sova/sim.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace sova {

namespace {

// Guards the choice and the lock. The chosen driver is also published through
// an atomic so process_driver() takes no lock once it is chosen (the C API
// may ask on every call).
std::mutex g_mutex;
std::atomic<Driver*> g_driver{nullptr};
bool g_locked = false;  // under g_mutex

/// The SOVA_DRIVER=sim driver: built on first use with the default SimConfig
/// and deliberately never destroyed, so it outlives every pool (including
/// pools torn down during static destruction) and its streams keep working
/// until the process ends. Static storage rather than a leaked `new`: it
/// stays reachable even after set_process_driver() replaces it, so leak
/// checkers (ASan's LeakSanitizer) do not report it.
Driver* kept_sim_driver() noexcept {
  try {
    static detail::NoDestroy<SimDriver> sim{SimConfig{}};
    return &sim.get();
  } catch (...) {
    return nullptr;  // the next call tries again
  }
}

/// The driver the environment asks for. Caller holds g_mutex.
Driver& from_environment() noexcept {
  const char* choice = std::getenv("SOVA_DRIVER");
  if (choice != nullptr && std::strcmp(choice, "sim") == 0) {
    if (Driver* sim = kept_sim_driver()) return *sim;
    // Should never happen (the sim needs only memfd and threads); say so
    // rather than fail every later call.
    std::fputs(
        "sova: SOVA_DRIVER=sim: the simulation driver could not be built; "
        "using the CUDA driver\n",
        stderr);
  }
  return cuda_driver();
}

/// The chosen driver, choosing it now if nobody has. Caller holds g_mutex.
Driver& chosen_locked() noexcept {
  Driver* driver = g_driver.load(std::memory_order_relaxed);
  if (driver == nullptr) {
    driver = &from_environment();
    g_driver.store(driver, std::memory_order_release);
  }
  return *driver;
}

}  // namespace

Driver& process_driver() noexcept {
  if (Driver* driver = g_driver.load(std::memory_order_acquire)) return *driver;
  std::lock_guard<std::mutex> lock(g_mutex);
  return chosen_locked();
}

cudaError_t set_process_driver(Driver* driver) noexcept {
  if (driver == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_locked) return cudaErrorInvalidValue;
  g_driver.store(driver, std::memory_order_release);
  return cudaSuccess;
}

Driver& detail::lock_process_driver() noexcept {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_locked = true;
  return chosen_locked();
}

}  // namespace sova
