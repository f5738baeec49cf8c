// sova_sleep_wake: a pool's sleep and wake on the GPU against a plain pinned
// cudaMemcpyAsync of the same bytes, in the same run (docs/sleep-wake.md).
//
// For each size (GiB) and mode (backup, discard): a pool filled with blocks
// of --block-mib, each set to its own byte; then --cycles sleep/wake cycles.
// Reported per cycle: sleep time (the call: the copies and the release),
// wake time (the call, and until the restore is complete on the stream),
// GiB/s of both against the plain copy's, the device's free memory before
// the pool, with the pool awake and asleep, the pinned host memory the pool
// keeps, and whether every block came back intact (first and last 4 KiB).
// The first cycle pins the host memory (a one-time cost, on several threads);
// later ones reuse it. --no-copy leaves the plain copy out (its columns read
// 0): it pins and frees a buffer of each size, seconds at 8 GiB, that a run
// comparing two trees of sova (tools/device/perf-gate.sh) does not need.
//
//   sova_sleep_wake [--sizes 1,8,32] [--cycles 3] [--block-mib 256] [--no-copy] [--json FILE]
//   sova_sleep_wake --drift-cycles 1000 [--size-gib 1] [--block-mib 256] [--json FILE]
//     drift: N cycles with backup of one pool, compared at cycle 1 and cycle
//     N (sleep_wake_drift.hpp); exit status 1 on any drift.
//   sova_sleep_wake --first-sleep [--sizes 1,8,32] [--block-mib 256] [--json FILE]
//     the first sleep of a pool without and with pin-ahead, each against the
//     warm sleep of the same pool (sleep_wake_first.hpp).
#include "sleep_wake_drift.hpp"
#include "sleep_wake_first.hpp"
#include "sleep_wake_util.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace sova;
using namespace sova::sleep_bench;

namespace {

struct Baseline {
  double d2h_gibs = 0, h2d_gibs = 0;
};

/// A plain pinned copy of `bytes` each way, in chunks of 1 GiB (the best of 2).
Baseline pinned_copy(std::size_t bytes, cudaStream_t stream) {
  void* dev = nullptr;
  void* host = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, bytes));
  CHECK_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
  CHECK_CUDA(cudaMemsetAsync(dev, 1, bytes, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  Baseline b;
  for (int round = 0; round < 2; ++round) {
    for (int dir = 0; dir < 2; ++dir) {
      const auto t = Clock::now();
      for (std::size_t off = 0; off < bytes; off += kGiB) {
        const std::size_t n = std::min(kGiB, bytes - off);
        char* d = static_cast<char*>(dev) + off;
        char* h = static_cast<char*>(host) + off;
        CHECK_CUDA(dir == 0 ? cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, stream)
                            : cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream));
      }
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const double gibs = static_cast<double>(bytes) / kGiB / seconds_since(t);
      double& best = dir == 0 ? b.d2h_gibs : b.h2d_gibs;
      best = std::max(best, gibs);
    }
  }
  CHECK_CUDA(cudaFree(dev));
  CHECK_CUDA(cudaFreeHost(host));
  return b;
}

bool intact(const std::vector<void*>& blocks, std::size_t block_bytes, std::size_t last_bytes, cudaStream_t stream) {
  std::vector<unsigned char> host(4096);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::size_t n = i + 1 == blocks.size() ? last_bytes : block_bytes;
    const unsigned char want = static_cast<unsigned char>(1 + i % 250);
    for (std::size_t off : {std::size_t{0}, n - 4096}) {
      CHECK_CUDA(
          cudaMemcpyAsync(host.data(), static_cast<char*>(blocks[i]) + off, 4096, cudaMemcpyDeviceToHost, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      for (unsigned char c : host) {
        if (c != want) return false;
      }
    }
  }
  return true;
}

std::vector<double> parse_list(const char* s) {
  std::vector<double> out;
  std::string item;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!item.empty()) out.push_back(std::atof(item.c_str()));
      item.clear();
      if (*p == '\0') break;
    } else {
      item += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> sizes = {1, 8, 32};
  int cycles = 3;
  std::size_t block_mib = 256;
  const char* json_path = nullptr;
  int drift_cycles = 0;
  double drift_gib = 1;
  bool first_sleep = false;
  bool plain_copy = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--drift-cycles" && i + 1 < argc)
      drift_cycles = std::atoi(argv[++i]);
    else if (a == "--first-sleep")
      first_sleep = true;
    else if (a == "--no-copy")
      plain_copy = false;
    else if (a == "--size-gib" && i + 1 < argc)
      drift_gib = std::atof(argv[++i]);
    else if (a == "--sizes" && i + 1 < argc)
      sizes = parse_list(argv[++i]);
    else if (a == "--cycles" && i + 1 < argc)
      cycles = std::atoi(argv[++i]);
    else if (a == "--block-mib" && i + 1 < argc)
      block_mib = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--sizes 1,8,32] [--cycles 3] [--block-mib 256] [--no-copy] [--json FILE]\n"
                   "       %s --drift-cycles N [--size-gib 1] [--block-mib 256] [--json FILE]\n"
                   "       %s --first-sleep [--sizes 1,8,32] [--block-mib 256] [--json FILE]\n",
                   argv[0], argv[0], argv[0]);
      return 2;
    }
  }
  if (cycles < 1 || block_mib == 0 || sizes.empty()) {
    std::fprintf(stderr, "sova_sleep_wake: --cycles >= 1, --block-mib >= 1, a size needed\n");
    return 2;
  }
  if (drift_cycles != 0) {
    if (drift_cycles < 2 || drift_gib <= 0 || block_mib == 0) {
      std::fprintf(stderr, "sova_sleep_wake: --drift-cycles >= 2, --size-gib > 0, --block-mib >= 1\n");
      return 2;
    }
    return run_drift(drift_cycles, static_cast<std::size_t>(drift_gib * static_cast<double>(kGiB)), block_mib * kMiB,
                     json_path);
  }
  if (first_sleep) return run_first_sleep(sizes, block_mib * kMiB, json_path);
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FILE* json = json_path ? std::fopen(json_path, "w") : nullptr;
  std::printf("device %s\n", prop.name);
  std::printf("%6s %8s %5s %10s %9s %10s %9s %11s %11s %12s %12s %12s %7s\n", "GiB", "mode", "cycle", "sleep_s",
              "sleep/s", "wake_s", "wake/s", "pinned_d2h", "pinned_h2d", "free_before", "free_asleep", "host_kept",
              "intact");
  bool all_ok = true;
  for (double gib : sizes) {
    const std::size_t bytes = static_cast<std::size_t>(gib * static_cast<double>(kGiB));
    const Baseline base = plain_copy ? pinned_copy(bytes, stream) : Baseline{};
    for (SleepMode mode : {SleepMode::backup, SleepMode::discard}) {
      const char* mode_name = mode == SleepMode::backup ? "backup" : "discard";
      const std::size_t free_before_pool = device_free();
      Pool pool;
      const std::size_t block = block_mib * kMiB;
      const std::vector<void*> blocks = fill_blocks(pool, bytes, block, stream);
      const std::size_t last = bytes - (blocks.size() - 1) * block;
      const std::size_t free_awake = device_free();
      for (int c = 0; c < cycles; ++c) {
        auto t = Clock::now();
        const cudaError_t se = pool.sleep(mode, stream);
        const double sleep_s = seconds_since(t);
        const std::size_t free_asleep = device_free();
        t = Clock::now();
        const cudaError_t we = pool.wake(stream);
        const double wake_call_s = seconds_since(t);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        const double wake_s = seconds_since(t);
        if (se != cudaSuccess || we != cudaSuccess) {
          std::printf("sleep: %s, wake: %s\n", cudaGetErrorName(se), cudaGetErrorName(we));
          all_ok = false;
          break;
        }
        const bool ok = mode == SleepMode::discard || intact(blocks, block, last, stream);
        all_ok = all_ok && ok;
        const PoolStats s = pool.stats();
        const double sleep_gibs = mode == SleepMode::backup ? gib / sleep_s : 0;
        const double wake_gibs = mode == SleepMode::backup ? gib / wake_s : 0;
        std::printf("%6.1f %8s %5d %10.3f %9.1f %10.3f %9.1f %11.1f %11.1f %12zu %12zu %12llu %7s\n", gib, mode_name, c,
                    sleep_s, sleep_gibs, wake_s, wake_gibs, base.d2h_gibs, base.h2d_gibs, free_before_pool >> 20,
                    free_asleep >> 20, static_cast<unsigned long long>(s.sleep_host_bytes >> 20), ok ? "yes" : "NO");
        if (json != nullptr) {
          std::fprintf(json,
                       "{\"device\": \"%s\", \"gib\": %.3f, \"mode\": \"%s\", \"cycle\": %d, \"sleep_s\": %.6f, "
                       "\"wake_call_s\": %.6f, \"wake_s\": %.6f, \"sleep_gibs\": %.2f, \"wake_gibs\": %.2f, "
                       "\"pinned_d2h_gibs\": %.2f, \"pinned_h2d_gibs\": %.2f, \"free_before_pool\": %zu, "
                       "\"free_awake\": %zu, \"free_asleep\": %zu, \"chunks\": %llu, \"sleep_host_bytes\": %llu, "
                       "\"intact\": %s}\n",
                       prop.name, gib, mode_name, c, sleep_s, wake_call_s, wake_s, sleep_gibs, wake_gibs, base.d2h_gibs,
                       base.h2d_gibs, free_before_pool, free_awake, free_asleep,
                       static_cast<unsigned long long>(s.chunks_mapped - s.chunks_unmapped),
                       static_cast<unsigned long long>(s.sleep_host_bytes), ok ? "true" : "false");
          std::fflush(json);
        }
      }
      for (void* p : blocks) pool.deallocate(p, stream);
      CHECK_CUDA(cudaStreamSynchronize(stream));
    }
  }
  if (json != nullptr) std::fclose(json);
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf(all_ok ? "all intact\n" : "FAILURES\n");
  return all_ok ? 0 : 1;
}
