// The pool-operation interpreter behind the fuzz target (docs/fuzzing.md): a byte
// string is a program of pool operations on a fresh simulation
// (include/sova/sim.hpp), and every promise the pool makes is checked as it
// runs. Used by the libFuzzer target (fuzz_target.cpp), by the replay of the
// seed corpus in the test suites, and multi-threaded under ThreadSanitizer
// (replay_main.cpp). docs/fuzzing.md describes the operations and checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace sova::fuzz {

/// A broken promise: what, and the operation that broke it.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Switches for checks of promises not yet kept (docs/fuzzing.md).
struct Options {
  /// A capture of plain work on a stream beside the pools' ("foreign": it
  /// never touches sova) that sova's device synchronizes invalidate is a
  /// failure. Off: only counted (Counts::foreign_invalidated), as trim_to,
  /// the out-of-memory path, a pool's destruction and the release worker
  /// may still synchronize the device (docs/graphs.md, "Limits").
  bool strict_foreign_captures = false;
};

/// Runs `data` as a program on one host thread, with the exact checks
/// (failed calls change nothing, used bytes equal the model's). Throws
/// Failure on the first broken promise.
void run_program(const std::uint8_t* data, std::size_t size, const Options& options = Options{});

/// Runs `data` split into `threads` programs on as many host threads that
/// share the pools (and hand blocks to one another); the checks that only
/// hold without concurrent calls are left out, and so are the captures,
/// graphs, sleep and wake (one-thread operations). Throws Failure.
void run_program_threaded(const std::uint8_t* data, std::size_t size, int threads, const Options& options = Options{});

/// What the programs run so far did (process-wide), to tell a run that
/// exercised the pool from one that did nothing.
struct Counts {
  long operations = 0, allocations = 0, failed_allocations = 0, frees = 0, refused_frees = 0, pools_made = 0,
       pools_refused = 0, streams_destroyed = 0, handoffs = 0;
  // Captures and graphs (one thread).
  long captures = 0, captures_ended = 0, captures_invalidated = 0, graph_allocations = 0, graph_failed_allocations = 0,
       graph_frees = 0, capture_frees_refused = 0, graph_launches = 0, graphs_released = 0, output_frees = 0,
       memory_back_checks = 0;
  // Foreign captures: begun, ended with a graph, invalidated (with a call
  // that may synchronize the device during it, and without).
  long foreign_captures = 0, foreign_ended = 0, foreign_invalidated = 0, foreign_invalidated_unexplained = 0;
  // Sleep and wake (one thread).
  long sleeps = 0, failed_sleeps = 0, cut_short_sleeps = 0, wakes = 0, failed_wakes = 0, frees_asleep = 0,
       allocations_asleep = 0, trims_asleep = 0, blocks_restored = 0, blocks_zeroed = 0, budget_refusals = 0,
       host_reserves = 0, host_releases = 0;
  // The marks' operations (one thread): frees on another thread during a
  // wake and the blocks their streams allocated again and checked, releases
  // after a growth that may have failed midway, reserves beyond the budget
  // or any host, rounds after a second stream and a UsedMemHigh reset.
  long frees_during_wake = 0, reallocated_after_wake = 0, failed_growth_releases = 0, huge_reserves = 0,
       stream_rounds = 0;
};
Counts counts();

}  // namespace sova::fuzz
