// sova_sleep_wake --first-sleep (sleep_wake_first.hpp).
#include "sleep_wake_first.hpp"

#include "sleep_wake_util.hpp"

#include <sova/pool.hpp>

#include <thread>

namespace sova::sleep_bench {

namespace {

/// The longest the pin-ahead thread is given to reach its target: 64 GiB at
/// 1 GiB/s, well below the slowest pinning seen.
constexpr double kPinAheadGiveUpS = 64;

struct FirstSleep {
  double pin_ahead_s = 0;  ///< until the thread held its target (0 without pin-ahead)
  double first_s = 0, warm_s = 0;
  std::size_t host_bytes = 0, pinned_ahead_bytes = 0;
  /// Resident memory before the first sleep and once the backup is released
  /// (release_sleep_host_memory): the backup's pages given back.
  std::size_t rss_before = 0, rss_released = 0;
  bool ok = true;
};

/// Waits until the pool's pin-ahead thread holds its target; false on giving up.
bool wait_for_pin_ahead(Pool& pool) {
  const auto t = Clock::now();
  for (;;) {
    const PoolStats s = pool.stats();
    if (s.sleep_pin_ahead_target != 0 && s.sleep_pin_ahead_bytes >= s.sleep_pin_ahead_target) return true;
    if (s.sleep_pin_ahead_failures != 0 || seconds_since(t) > kPinAheadGiveUpS) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

FirstSleep measure(std::size_t bytes, std::size_t block_bytes, bool pin_ahead, cudaStream_t stream) {
  PoolOptions options;
  options.sleep_pin_ahead = pin_ahead;
  Pool pool(options);
  const std::vector<void*> blocks = fill_blocks(pool, bytes, block_bytes, stream);
  FirstSleep r;
  r.rss_before = resident_bytes();
  auto t = Clock::now();
  if (pin_ahead) {
    r.ok = wait_for_pin_ahead(pool);
    r.pin_ahead_s = seconds_since(t);
  }
  r.pinned_ahead_bytes = pool.stats().sleep_pin_ahead_bytes;
  for (double* sleep_s : {&r.first_s, &r.warm_s}) {
    t = Clock::now();
    const cudaError_t slept = pool.sleep(SleepMode::backup, stream);
    *sleep_s = seconds_since(t);
    const cudaError_t woke = pool.wake(stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    r.ok = r.ok && slept == cudaSuccess && woke == cudaSuccess;
  }
  r.host_bytes = pool.stats().sleep_host_bytes;
  r.ok = r.ok && pool.release_sleep_host_memory() == cudaSuccess;
  r.rss_released = resident_bytes();
  for (void* p : blocks) pool.deallocate(p, stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  return r;
}

}  // namespace

int run_first_sleep(const std::vector<double>& sizes_gib, std::size_t block_bytes, const char* json_path) {
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FILE* json = json_path != nullptr ? std::fopen(json_path, "a") : nullptr;
  std::printf("%6s %9s %11s %10s %9s %11s %12s %13s %14s %4s\n", "GiB", "pin_ahead", "pin_ahead_s", "first_s",
              "warm_s", "first/warm", "host_kept", "pinned_ahead", "rss_released", "ok");
  bool all_ok = true;
  for (double gib : sizes_gib) {
    const std::size_t bytes = static_cast<std::size_t>(gib * static_cast<double>(kGiB));
    for (bool pin_ahead : {false, true}) {
      const FirstSleep r = measure(bytes, block_bytes, pin_ahead, stream);
      all_ok = all_ok && r.ok;
      const double ratio = r.warm_s > 0 ? r.first_s / r.warm_s : 0;
      // MiB resident after the release beyond before the first sleep (negative: fewer).
      const long long rss_grew_mib =
          (static_cast<long long>(r.rss_released) - static_cast<long long>(r.rss_before)) / (1 << 20);
      std::printf("%6.1f %9s %11.3f %10.3f %9.3f %11.2f %12zu %13zu %+14lld %4s\n", gib, pin_ahead ? "on" : "off",
                  r.pin_ahead_s, r.first_s, r.warm_s, ratio, r.host_bytes >> 20, r.pinned_ahead_bytes >> 20,
                  rss_grew_mib, r.ok ? "yes" : "NO");
      if (json != nullptr) {
        std::fprintf(json,
                     "{\"mode\": \"first_sleep\", \"gib\": %.3f, \"pin_ahead\": %s, \"pin_ahead_s\": %.6f, "
                     "\"first_sleep_s\": %.6f, \"warm_sleep_s\": %.6f, \"first_over_warm\": %.3f, "
                     "\"sleep_host_bytes\": %zu, \"pinned_ahead_bytes\": %zu, \"rss_before_bytes\": %zu, "
                     "\"rss_after_release_bytes\": %zu, \"ok\": %s}\n",
                     gib, pin_ahead ? "true" : "false", r.pin_ahead_s, r.first_s, r.warm_s, ratio, r.host_bytes,
                     r.pinned_ahead_bytes, r.rss_before, r.rss_released, r.ok ? "true" : "false");
        std::fflush(json);
      }
    }
  }
  if (json != nullptr) std::fclose(json);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}

}  // namespace sova::sleep_bench
