// sova_stress / sova_stress_gpu: options, then the workload (stress_run.cpp)
// on this binary's TestDevice (the simulation or the GPU).
#include "stress/stress_run.hpp"

#include <sova/pool.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>

namespace sova::stress {

namespace {

const char kUsage[] =
    "usage: %s [options]\n"
    "  --smoke                  a short run for CI (a few seconds on the simulation)\n"
    "  --seed N                 random seed (default 1)\n"
    "  --threads T              host threads (default 8)\n"
    "  --streams-per-thread S   streams each thread owns (default 2)\n"
    "  --ops N                  operations per thread (default 400000; --smoke: 4000,\n"
    "                           2000 with blocks up to 2 MiB under ThreadSanitizer)\n"
    "  --time-limit SECONDS     stop issuing operations after this long, then check\n"
    "                           everything as usual (default 240; 0 = none)\n"
    "  --max-block BYTES        largest block (default 8 MiB; K/M/G suffixes)\n"
    "  --max-live N             blocks a thread holds at most (default 48)\n"
    "  --max-busy-us US         longest busy period put on a stream (default 1000)\n"
    "  --reuse MODE             all | none | opportunistic | internal (default all):\n"
    "                           the pool's cudaMemPoolReuse* switches\n"
    "  --release-threshold B    cudaMemPoolAttrReleaseThreshold (default 0; 'max')\n"
    "  --pool-limit BYTES       the pool's max_size (default 0 = the device); with a\n"
    "                           limit, out-of-memory is counted, not a failure\n"
    "  --check-every N          thread 0 checks the pool's invariants every N ops\n"
    "                           (default 1000; 0 = only at the end)\n"
    "  --watchdog SECONDS       abort when no thread progresses this long (default 120; 0 = off)\n"
    "  --negative-control       skip the ordering of frees on another stream: the run\n"
    "                           must then fail with mismatches (shows the checks work)\n"
    "  --verbose                print progress\n"
    "  --help\n";

bool parse_u64(const char* text, std::uint64_t* out) {
  if (text == nullptr || *text == '\0' || *text == '-') return false;
  if (std::strcmp(text, "max") == 0) {
    *out = std::numeric_limits<std::uint64_t>::max();
    return true;
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text) return false;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  if (*end == 'M' || *end == 'm') shift = 20;
  if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) {
    ++end;
    if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return false;
    value <<= shift;
  }
  if (*end != '\0') return false;
  *out = value;
  return true;
}

bool parse_double(const char* text, double* out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || value < 0) return false;
  *out = value;
  return true;
}

}  // namespace

const char* reuse_name(Reuse reuse) {
  switch (reuse) {
    case Reuse::all: return "all";
    case Reuse::none: return "none";
    case Reuse::opportunistic: return "opportunistic";
    case Reuse::internal: return "internal";
  }
  return "?";
}

bool parse_options(int argc, char** argv, Options* options, int* exit_code) {
  Options o;
  // --smoke first, so that explicit options given with it win.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) o.smoke = true;
  }
  if (o.smoke) {
    o.ops = 4000;
    o.max_live = 32;
    o.max_busy_us = 500;
    o.check_every = 250;
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer instruments every word the simulated kernels write and
    // check (~40x slower): fewer, smaller blocks keep the CI test in its timeout.
    o.ops = 2000;
    o.max_block = std::size_t{2} << 20;
    o.tsan_scaled = true;
#endif
  }
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s\n", argv[0], message.c_str());
    std::fprintf(stderr, kUsage, argv[0]);
    *exit_code = 2;
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--smoke") continue;
    if (arg == "--help" || arg == "-h") {
      std::printf(kUsage, argv[0]);
      *exit_code = 0;
      return false;
    }
    if (arg == "--negative-control") {
      o.negative_control = true;
      continue;
    }
    if (arg == "--verbose" || arg == "-v") {
      o.verbose = true;
      continue;
    }
    if (i + 1 >= argc) return fail("missing value after " + arg);
    const char* value = argv[++i];
    std::uint64_t n = 0;
    double d = 0;
    auto number = [&](std::uint64_t lo, std::uint64_t hi) { return parse_u64(value, &n) && n >= lo && n <= hi; };
    if (arg == "--seed") {
      if (!number(0, std::numeric_limits<std::uint64_t>::max())) return fail("bad --seed " + std::string(value));
      o.seed = n;
    } else if (arg == "--threads") {
      if (!number(1, 1024)) return fail("bad --threads (1..1024): " + std::string(value));
      o.threads = static_cast<int>(n);
    } else if (arg == "--streams-per-thread") {
      if (!number(1, 64)) return fail("bad --streams-per-thread (1..64): " + std::string(value));
      o.streams_per_thread = static_cast<int>(n);
    } else if (arg == "--ops") {
      if (!number(0, std::uint64_t{1} << 40)) return fail("bad --ops " + std::string(value));
      o.ops = n;
    } else if (arg == "--time-limit") {
      if (!parse_double(value, &d)) return fail("bad --time-limit " + std::string(value));
      o.time_limit_s = d;
    } else if (arg == "--max-block") {
      if (!number(256, std::uint64_t{1} << 40)) return fail("bad --max-block (>= 256): " + std::string(value));
      o.max_block = n;
    } else if (arg == "--max-live") {
      if (!number(1, 1u << 20)) return fail("bad --max-live " + std::string(value));
      o.max_live = n;
    } else if (arg == "--max-busy-us") {
      if (!number(0, 10'000'000)) return fail("bad --max-busy-us " + std::string(value));
      o.max_busy_us = static_cast<std::uint32_t>(n);
    } else if (arg == "--reuse") {
      const std::string mode = value;
      if (mode == "all")
        o.reuse = Reuse::all;
      else if (mode == "none")
        o.reuse = Reuse::none;
      else if (mode == "opportunistic")
        o.reuse = Reuse::opportunistic;
      else if (mode == "internal")
        o.reuse = Reuse::internal;
      else
        return fail("bad --reuse (all|none|opportunistic|internal): " + mode);
    } else if (arg == "--release-threshold") {
      if (!number(0, std::numeric_limits<std::uint64_t>::max())) {
        return fail("bad --release-threshold " + std::string(value));
      }
      o.release_threshold = n;
    } else if (arg == "--pool-limit") {
      if (!number(0, std::numeric_limits<std::size_t>::max())) return fail("bad --pool-limit " + std::string(value));
      o.pool_limit = n;
    } else if (arg == "--check-every") {
      if (!number(0, std::numeric_limits<std::uint64_t>::max())) return fail("bad --check-every " + std::string(value));
      o.check_every = n;
    } else if (arg == "--watchdog") {
      if (!parse_double(value, &d)) return fail("bad --watchdog " + std::string(value));
      o.watchdog_s = d;
    } else {
      return fail("unknown option " + arg);
    }
  }
  if (o.min_block > o.max_block) o.min_block = o.max_block;
  *options = o;
  return true;
}

}  // namespace sova::stress

int main(int argc, char** argv) {
  using namespace sova::stress;
  Options options;
  int exit_code = 0;
  if (!parse_options(argc, argv, &options, &exit_code)) return exit_code;
  try {
    std::unique_ptr<sova::test::TestDevice> device = sova::test::make_test_device();
    return run_stress(options, *device);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sova_stress: FAILED: %s\n", e.what());
    return 1;
  }
}
