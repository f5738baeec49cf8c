// sova_seed — the seed program: on one stream, 100 x (allocate 4 MiB, or
// --mib N, kernel, free) through cudaMalloc, cudaMallocAsync, sova and a
// preallocated buffer (the floor). Each repetition of the 100-iteration loop is timed end to end
// with a host clock around the loop plus the final stream synchronize, the way
// a whole program sees it. Variants are interleaved, in a rotating order, so
// drift (clocks, temperature, other tenants) falls on all of them alike.
// Prints median and p10/p90 per variant and the ratio to preallocated, and
// says how to read them (lower is better; preallocated is the floor); a
// kernel result that is wrong is an error (exit 1).
//
// Without a GPU it runs the same loop for sova and preallocated on sova's host
// simulation and says so: those are host timings, not GPU timings.
//
// Usage: sova_seed [--reps N] [--threshold-max] [--mib N]
#include "seed.hpp"

#include "../common.hpp"

#include <sova/driver.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <vector>

namespace {

using sova_bench::SeedVariant;

constexpr int kWarmupLoops = 3;

struct Options {
  int reps = 30;
  bool threshold_max = false;
  std::size_t mib = sova_bench::kSeedDefaultMiB;
};

void usage(FILE* to) {
  std::fprintf(to,
               "usage: sova_seed [--reps N] [--threshold-max] [--mib N]\n"
               "  --reps N          timed repetitions of the 100-iteration loop per variant (default 30)\n"
               "  --threshold-max   set the release threshold of sova's and the runtime's pools to\n"
               "                    UINT64_MAX (default: 0, both allocators' own default)\n"
               "  --mib N           the block each iteration allocates, in MiB (1 to %zu, default %zu)\n",
               sova_bench::kSeedMaxMiB, sova_bench::kSeedDefaultMiB);
}

// Linear interpolation between closest ranks; `sorted` is ascending, non-empty.
double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

struct Row {
  SeedVariant variant;
  std::vector<double> ms;  // one entry per timed repetition; empty = not run here
};

// Warm-up, verification, then `reps` interleaved timed loops. Seed is GpuSeed
// or SimSeed; only GpuSeed has an untimed full read-back check (verify).
template <class Seed>
std::vector<Row> measure(Seed& seed, const std::vector<SeedVariant>& variants, int reps) {
  for (SeedVariant v : variants) {
    if constexpr (requires { seed.verify(v); }) seed.verify(v);
  }
  for (int i = 0; i < kWarmupLoops; ++i) {
    for (SeedVariant v : variants) seed.run(v);
  }
  std::vector<Row> rows;
  for (SeedVariant v : variants) rows.push_back({v, {}});
  const std::size_t n = variants.size();
  for (int r = 0; r < reps; ++r) {
    for (std::size_t k = 0; k < n; ++k) {
      Row& row = rows[(static_cast<std::size_t>(r) + k) % n];  // rotate who goes first
      row.ms.push_back(seed.run(row.variant) * 1e3);
    }
  }
  return rows;
}

void print_table(std::vector<Row> rows, const char* skipped_reason) {
  double floor_ms = 0, floor_best_ms = 0;
  for (Row& row : rows) {
    std::sort(row.ms.begin(), row.ms.end());
    if (row.variant == SeedVariant::preallocated) {
      floor_ms = percentile(row.ms, 0.5);
      floor_best_ms = row.ms.front();
    }
  }
  std::printf("\n%-16s %10s %10s %10s %10s %16s %12s\n", "variant", "median ms", "p10 ms", "p90 ms", "best ms",
              "vs preallocated", "best vs pre");
  for (int i = 0; i < sova_bench::kSeedVariants; ++i) {
    const auto v = static_cast<SeedVariant>(i);
    const auto it = std::find_if(rows.begin(), rows.end(), [v](const Row& r) { return r.variant == v; });
    if (it == rows.end()) {
      std::printf("%-16s %s\n", sova_bench::seed_variant_name(v), skipped_reason);
      continue;
    }
    const double median = percentile(it->ms, 0.5);
    std::printf("%-16s %10.3f %10.3f %10.3f %10.3f %15.3fx %11.3fx\n", sova_bench::seed_variant_name(v), median,
                percentile(it->ms, 0.1), percentile(it->ms, 0.9), it->ms.front(), median / floor_ms,
                it->ms.front() / floor_best_ms);
  }
  std::printf(
      "\nLower is better. Each time is one %d-iteration loop (median, p10, p90 and best of the repetitions);\n"
      "\"vs preallocated\" is a variant's median over the preallocated buffer's, whose loop allocates\n"
      "nothing: 1.00x is the floor, and what lies above it is the allocator's cost; \"best vs pre\" is the\n"
      "same for the fastest repetition of each (the figure least disturbed by other work on the host).\n",
      sova_bench::kSeedIterations);
  for (const Row& row : rows) {
    if (row.variant == SeedVariant::sova) {
      std::printf("sova: %+.1f%% over preallocated (median against median; 0%% = allocating costs nothing)\n",
                  (percentile(row.ms, 0.5) / floor_ms - 1.0) * 100.0);
    }
  }
}

template <class Seed>
int run_seed(Seed& seed, const std::vector<SeedVariant>& variants, const Options& opt, const char* skipped_reason) {
  seed.set_release_threshold(opt.threshold_max ? UINT64_MAX : 0);
  std::printf(
      "%d repetitions per variant after %d warm-up loops, variants interleaved; "
      "release threshold: %s\n",
      opt.reps, kWarmupLoops, opt.threshold_max ? "UINT64_MAX" : "0 (both pools' default)");
  std::fflush(stdout);
  const std::vector<Row> rows = measure(seed, variants, opt.reps);
  const std::uint64_t errors = seed.kernel_errors();
  print_table(rows, skipped_reason);
  if (errors != 0) {
    std::fprintf(stderr, "sova_seed: error: the kernel read back %llu wrong floats\n",
                 static_cast<unsigned long long>(errors));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      opt.reps = std::atoi(argv[++i]);
      if (opt.reps < 1) {
        usage(stderr);
        return 2;
      }
    } else if (std::strcmp(argv[i], "--threshold-max") == 0) {
      opt.threshold_max = true;
    } else if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
      char* end = nullptr;
      const unsigned long long mib = std::strtoull(argv[++i], &end, 10);
      if (*end != '\0' || mib < 1 || mib > sova_bench::kSeedMaxMiB) {
        usage(stderr);
        return 2;
      }
      opt.mib = static_cast<std::size_t>(mib);
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }

  std::printf(
      "sova seed: %d x (allocate %zu MiB, kernel, free) on one stream; each loop timed with a host\n"
      "clock around the loop plus the stream synchronize\n",
      sova_bench::kSeedIterations, opt.mib);
  try {
    const bool gpu = sova_bench::have_gpu();
#if defined(SOVA_BENCH_KERNELS)
    // SOVA_DRIVER=sim puts sova's C API on the simulation even on a GPU machine.
    if (gpu && sova_bench::capi_sim() == nullptr) {
      std::printf("device: %s\n", sova_bench::device_name().c_str());
      sova_bench::GpuSeed seed(opt.mib);
      return run_seed(
          seed,
          {SeedVariant::cuda_malloc, SeedVariant::cuda_malloc_async, SeedVariant::sova, SeedVariant::preallocated}, opt,
          "");
    }
#else
    if (gpu) {
      std::printf(
          "a CUDA GPU is present, but sova_seed was built without CUDA kernels (no nvcc, or "
          "-Dgpu=disabled): running on sova's host simulation (timings are host timings, not "
          "GPU timings)\n");
      sova_bench::check_cuda(sova::set_process_driver(&sova_bench::shared_sim()), "sova::set_process_driver");
    }
#endif
    if (!gpu) {
      std::printf(
          "no CUDA GPU found: running on sova's host simulation "
          "(timings are host timings, not GPU timings)\n");
    }
    sova::SimDriver* sim = sova_bench::capi_sim();
    if (sim == nullptr) throw std::runtime_error("sova's C API is not on the host simulation");
    sova_bench::SimSeed seed(*sim, opt.mib);
    return run_seed(seed, {SeedVariant::sova, SeedVariant::preallocated}, opt,
                    gpu ? "skipped (built without CUDA kernels)" : "skipped (no GPU)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sova_seed: error: %s\n", e.what());
    return 1;
  }
}
