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

/// Runs `data` as a program on one host thread, with the exact checks
/// (failed calls change nothing, used bytes equal the model's). Throws
/// Failure on the first broken promise.
void run_program(const std::uint8_t* data, std::size_t size);

/// Runs `data` split into `threads` programs on as many host threads that
/// share the pools (and hand blocks to one another); the checks that only
/// hold without concurrent calls are left out. Throws Failure.
void run_program_threaded(const std::uint8_t* data, std::size_t size, int threads);

/// What the programs run so far did (process-wide), to tell a run that
/// exercised the pool from one that did nothing.
struct Counts {
  long operations = 0, allocations = 0, failed_allocations = 0, frees = 0, refused_frees = 0, pools_made = 0,
       pools_refused = 0, streams_destroyed = 0, handoffs = 0;
};
Counts counts();

}  // namespace sova::fuzz
