// sova_sleep_wake's drift mode (sleep_wake_drift.hpp).
#include "sleep_wake_drift.hpp"

#include "sleep_wake_util.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

namespace sova::sleep_bench {

namespace {

/// What is compared between cycle 1 and the last.
struct Sample {
  int cycle = 0;
  double sleep_s = 0, wake_s = 0;
  std::size_t free_asleep = 0;    ///< cudaMemGetInfo after the sleep
  double granules_per_chunk = 0;  ///< (free before the pool - free asleep) / granule / chunks
  std::uint64_t host_bytes = 0;   ///< PoolStats::sleep_host_bytes after the wake
  std::size_t rss = 0;            ///< resident bytes after the wake
  std::uint64_t reserved = 0;     ///< PoolStats::reserved_current after the wake
};

/// Block `block`'s bytes: splitmix64 of the word's index, so that a byte
/// moved, lost or left stale shows.
void pattern(std::size_t block, std::vector<unsigned char>& out) {
  for (std::size_t i = 0; i < out.size(); i += 8) {
    std::uint64_t z = (static_cast<std::uint64_t>(block) << 40) + i / 8 + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(out.data() + i, &z, std::min<std::size_t>(8, out.size() - i));
  }
}

void print(const Sample& s) {
  std::printf("%6d %9.4f %9.4f %14zu %18.3f %14llu %12zu %14llu\n", s.cycle, s.sleep_s, s.wake_s, s.free_asleep >> 20,
              s.granules_per_chunk, static_cast<unsigned long long>(s.host_bytes >> 20), s.rss >> 20,
              static_cast<unsigned long long>(s.reserved >> 20));
}

}  // namespace

int run_drift(int cycles, std::size_t bytes, std::size_t block_bytes, const char* json_path) {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::size_t free_before_pool = device_free();
  Pool pool;
  std::vector<void*> blocks;
  std::vector<std::size_t> sizes;
  std::vector<unsigned char> want, got;
  for (std::size_t off = 0; off < bytes; off += block_bytes) {
    const std::size_t n = std::min(block_bytes, bytes - off);
    void* p = pool.allocate(n, stream);
    want.resize(n);
    pattern(blocks.size(), want);
    CHECK_CUDA(cudaMemcpyAsync(p, want.data(), n, cudaMemcpyHostToDevice, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    blocks.push_back(p);
    sizes.push_back(n);
  }
  const PoolStats awake = pool.stats();
  const std::uint64_t chunks = awake.chunks_mapped - awake.chunks_unmapped;
  const std::size_t granule = pool.granularity();
  std::printf("device %s: drift over %d sleep (backup) / wake cycles of %.3f GiB in %zu blocks, %llu chunks\n",
              prop.name, cycles, static_cast<double>(bytes) / kGiB, blocks.size(),
              static_cast<unsigned long long>(chunks));
  std::printf("%6s %9s %9s %14s %18s %14s %12s %14s\n", "cycle", "sleep_s", "wake_s", "free_asleep_MiB",
              "granules/chunk", "host_kept_MiB", "rss_MiB", "reserved_MiB");
  Sample first, last;
  for (int c = 1; c <= cycles; ++c) {
    Sample s;
    s.cycle = c;
    auto t = Clock::now();
    const cudaError_t se = pool.sleep(SleepMode::backup, stream);
    s.sleep_s = seconds_since(t);
    s.free_asleep = device_free();
    t = Clock::now();
    const cudaError_t we = pool.wake(stream);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    s.wake_s = seconds_since(t);
    if (se != cudaSuccess || we != cudaSuccess) {
      std::printf("cycle %d: sleep: %s, wake: %s\nDRIFT: a cycle failed\n", c, cudaGetErrorName(se),
                  cudaGetErrorName(we));
      return 1;
    }
    const PoolStats st = pool.stats();
    s.host_bytes = st.sleep_host_bytes;
    s.reserved = st.reserved_current;
    s.rss = resident_bytes();
    s.granules_per_chunk = chunks == 0 ? 0
                                       : (static_cast<double>(free_before_pool) - static_cast<double>(s.free_asleep)) /
                                             static_cast<double>(granule) / static_cast<double>(chunks);
    if (c == 1) first = s;
    if (c == cycles) last = s;
    if (c == 1 || c == cycles || c % std::max(1, cycles / 4) == 0) print(s);
  }
  // Every byte of every block, against its pattern.
  std::size_t wrong = 0;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    want.resize(sizes[b]);
    got.resize(sizes[b]);
    pattern(b, want);
    CHECK_CUDA(cudaMemcpyAsync(got.data(), blocks[b], sizes[b], cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    if (std::memcmp(want.data(), got.data(), sizes[b]) != 0) {
      for (std::size_t i = 0; i < sizes[b]; ++i) wrong += want[i] != got[i] ? 1 : 0;
    }
  }
  std::vector<const char*> drift;
  if (last.free_asleep < first.free_asleep) drift.push_back("the device's free memory asleep fell");
  if (last.granules_per_chunk > 1.0 || first.granules_per_chunk > 1.0)
    drift.push_back("asleep, more than a granule per chunk short of the free memory before the pool");
  if (last.host_bytes != first.host_bytes) drift.push_back("the pinned host memory kept changed");
  if (last.rss > first.rss + kRssSlackBytes) drift.push_back("the resident memory grew");
  if (last.reserved != first.reserved || first.reserved != awake.reserved_current)
    drift.push_back("the pool's reserved bytes changed");
  if (wrong != 0) drift.push_back("contents differ");
  std::printf(
      "free before the pool %zu MiB; granule %zu KiB; resident memory %+lld KiB from cycle 1 to %d; "
      "%zu bytes differ\n",
      free_before_pool >> 20, granule >> 10,
      (static_cast<long long>(last.rss) - static_cast<long long>(first.rss)) / 1024, cycles, wrong);
  for (const char* d : drift) std::printf("DRIFT: %s\n", d);
  if (drift.empty()) std::printf("no drift over %d cycles; contents bit-exact\n", cycles);
  if (json_path != nullptr) {
    if (std::FILE* json = std::fopen(json_path, "a")) {
      for (const Sample* s : {&first, &last}) {
        std::fprintf(json,
                     "{\"device\": \"%s\", \"mode\": \"drift\", \"gib\": %.3f, \"cycles\": %d, \"cycle\": %d, "
                     "\"sleep_s\": %.6f, \"wake_s\": %.6f, \"free_before_pool\": %zu, \"free_asleep\": %zu, "
                     "\"granules_per_chunk\": %.4f, \"chunks\": %llu, \"sleep_host_bytes\": %llu, \"rss\": %zu, "
                     "\"reserved\": %llu, \"bytes_wrong\": %zu, \"drift\": %s}\n",
                     prop.name, static_cast<double>(bytes) / kGiB, cycles, s->cycle, s->sleep_s, s->wake_s,
                     free_before_pool, s->free_asleep, s->granules_per_chunk, static_cast<unsigned long long>(chunks),
                     static_cast<unsigned long long>(s->host_bytes), s->rss,
                     static_cast<unsigned long long>(s->reserved), wrong, drift.empty() ? "false" : "true");
      }
      std::fclose(json);
    }
  }
  for (std::size_t b = 0; b < blocks.size(); ++b) pool.deallocate(blocks[b], stream);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return drift.empty() ? 0 : 1;
}

}  // namespace sova::sleep_bench
