// sova seed loop — the project's main job: on one stream, 100 times (allocate
// a block, 4 MiB unless asked otherwise, run a kernel over it, free), timed
// whole-program: a host clock around the 100 iterations plus the final stream
// synchronize.
//
// Shared by the sova_seed table printer (seed/main.cpp) and the Google
// Benchmark cases (seed_cases.cpp), so both time exactly the same loop.
#pragma once

#include "../common.hpp"

#include <sova/sim.hpp>
#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace sova_bench {

constexpr int kSeedIterations = 100;
/// The block size in MiB: the seed program's (sova_seed without --mib), and
/// the range a run may ask for. Every size is a whole number of MiB, so one
/// float per kernel thread covers the block exactly.
constexpr std::size_t kSeedDefaultMiB = 4;
constexpr std::size_t kSeedMaxMiB = 4096;
/// The sizes the seed/ benchmark cases run (seed/<variant>/threshold_max:T/mib:N):
/// below a 2 MiB granule, the seed's own, and many granules.
inline constexpr std::size_t kSeedCaseMiBs[] = {1, 4, 64};

/// Where each iteration's block comes from.
enum class SeedVariant {
  cuda_malloc,        ///< cudaMalloc / cudaFree (cudaFree synchronizes the device)
  cuda_malloc_async,  ///< cudaMallocAsync / cudaFreeAsync on the device's default pool
  sova,               ///< sovaMallocAsync / sovaFreeAsync on sova's current pool
  preallocated,       ///< one buffer allocated up front: the floor
};
constexpr int kSeedVariants = 4;
const char* seed_variant_name(SeedVariant v);

#if defined(SOVA_BENCH_KERNELS)
/// The loop on a GPU (seed_gpu.cu). Owns one non-blocking stream, the
/// preallocated buffer (as large as the largest block asked for so far) and a
/// device counter of mismatches the kernel saw. Every method throws
/// std::runtime_error naming the failing call; the constructor and
/// set_block_mib std::invalid_argument for a size outside 1..kSeedMaxMiB.
class GpuSeed {
 public:
  explicit GpuSeed(std::size_t mib = kSeedDefaultMiB);
  ~GpuSeed();
  GpuSeed(const GpuSeed&) = delete;
  GpuSeed& operator=(const GpuSeed&) = delete;

  /// The release threshold set, before each run, on both the runtime's default
  /// pool and sova's current pool: 0 (both allocators' default) or UINT64_MAX.
  void set_release_threshold(std::uint64_t bytes) { threshold_ = bytes; }
  /// The block each later iteration allocates (MiB); grows the preallocated
  /// buffer when it is smaller (untimed: it synchronizes the device).
  void set_block_mib(std::size_t mib);
  std::size_t block_bytes() const { return bytes_; }
  /// One timed loop of kSeedIterations; returns its wall time in seconds.
  double run(SeedVariant v);
  /// Untimed: one iteration, then copies the block back and checks every float.
  void verify(SeedVariant v);
  /// Mismatches the kernel has seen since construction (read back; synchronizes).
  std::uint64_t kernel_errors();

 private:
  float* acquire(SeedVariant v);
  void release(SeedVariant v, float* p);
  void launch(float* p, int tag);

  Stream stream_{nullptr};
  std::size_t bytes_ = 0;           // the block of each iteration
  float* prealloc_ = nullptr;       // prealloc_bytes_ of them, >= bytes_
  std::size_t prealloc_bytes_ = 0;
  unsigned long long* errors_ = nullptr;  // device counter
  std::uint64_t threshold_ = 0;
};
#endif

/// The loop on sova's host simulation, for machines without a GPU
/// (seed_sim.cpp), with blocks of `mib` MiB (1..kSeedMaxMiB, else
/// std::invalid_argument). The "kernel" is host work launched on a sim
/// stream: a memset of the block and a check of one word per page. Only the
/// sova and preallocated variants exist here; the preallocated buffer is
/// mapped through the same SimDriver calls sova uses, so both touch the same
/// kind of memory. The C API must already run on `sim` (capi_sim()).
class SimSeed {
 public:
  SimSeed(sova::SimDriver& sim, std::size_t mib);  // throws std::runtime_error
  ~SimSeed();
  SimSeed(const SimSeed&) = delete;
  SimSeed& operator=(const SimSeed&) = delete;

  void set_release_threshold(std::uint64_t bytes) { threshold_ = bytes; }
  double run(SeedVariant v);  // sova or preallocated only
  std::uint64_t kernel_errors();

 private:
  void* acquire(SeedVariant v);
  void release(SeedVariant v, void* p);

  sova::SimDriver& sim_;
  Stream stream_;
  std::size_t bytes_ = 0;  // the block of each iteration
  std::uintptr_t va_ = 0;  // the preallocated buffer's mapping
  std::size_t mapped_ = 0;  // its size: bytes_ rounded up to the granularity
  sova::PhysicalHandle chunk_ = 0;
  std::atomic<std::uint64_t> errors_{0};
  std::uint64_t threshold_ = 0;
};

/// mib << 20, or std::invalid_argument naming the range when mib is outside
/// 1..kSeedMaxMiB.
std::size_t seed_block_bytes(std::size_t mib);

/// Sets cudaMemPoolAttrReleaseThreshold on sova's current pool of device 0
/// (and, on a GPU, on the runtime's default pool). Throws std::runtime_error.
void set_seed_thresholds(std::uint64_t bytes, bool runtime_pool_too);

}  // namespace sova_bench
