// The stress program's workload (docs/stress.md): many host threads, each
// owning a few streams, allocate from one shared sova::Pool, write a tag into
// every block in stream order, and check it in stream order before the block
// is freed — on the stream that used it, on another of the thread's streams,
// or by another thread that received it. Any premature reuse by the pool
// (another stream handed a block still in use) shows up as a wrong tag,
// counted by TestDevice::expect and read back at the end.
//
// The same sources run on the host simulation (sova_stress, linked with
// test/support/sim_test_device.cpp) and on a GPU (sova_stress_gpu, linked
// with test/support/cuda_test_device.cu).
#pragma once

#include "support/test_device.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace sova::stress {

/// Which of the pool's cross-stream reuse switches are on (--reuse).
enum class Reuse { all, none, opportunistic, internal };

struct Options {
  std::uint64_t seed = 1;
  int threads = 8;
  int streams_per_thread = 2;
  /// Operations per thread. The default is the long run (about a minute on an
  /// H100, an estimate: see docs/stress.md); --smoke makes it small.
  std::uint64_t ops = 400000;
  /// Stop issuing operations after this many seconds (0 = never): the long run
  /// then ends cleanly, with every check, inside the test's timeout.
  double time_limit_s = 240;
  std::size_t min_block = 256;
  std::size_t max_block = std::size_t{8} << 20;
  /// Blocks a thread holds at most at once.
  std::size_t max_live = 48;
  /// Longest TestDevice::busy period, in microseconds.
  std::uint32_t max_busy_us = 1000;
  /// Thread 0 calls Pool::check_invariants every this many of its operations (0 = never).
  std::uint64_t check_every = 1000;
  Reuse reuse = Reuse::all;
  std::uint64_t release_threshold = 0;
  /// PoolOptions::max_size; 0 = the device. With a limit, running out of memory
  /// is allowed (counted); without one it is a failure.
  std::size_t pool_limit = 0;
  /// Abort with a report when no thread makes progress for this long (0 = never).
  double watchdog_s = 120;
  /// Breaks the user's side of the contract on purpose: frees on another
  /// stream skip the ordering. The run must then FAIL with mismatches; this
  /// shows the tag checks can see premature reuse at all.
  bool negative_control = false;
  bool smoke = false;
  bool tsan_scaled = false;  ///< --smoke made smaller for a ThreadSanitizer build
  bool verbose = false;
};

/// Parses argv; on error or --help prints to stderr/stdout and returns false
/// with `exit_code` set.
bool parse_options(int argc, char** argv, Options* options, int* exit_code);

const char* reuse_name(Reuse reuse);

/// Runs the workload on `device`. Returns 0 when every check held, 1 otherwise
/// (the failures are printed to stderr).
int run_stress(const Options& options, sova::test::TestDevice& device);

}  // namespace sova::stress
