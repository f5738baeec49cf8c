// replay/ — memory over time. When asked for (--replay_memory_out, see
// catalog.hpp), the first warm-up replay of each (trace, allocator) pair in
// the process reads memory_now (memory_now.hpp) before the first operation,
// every N operations and after the last, and the rows go to one CSV file:
//
//   trace,allocator,label,op,requested_bytes,used_bytes,reserved_bytes
//
// op: operations done (0 = none yet); requested_bytes: bytes live in the trace
// at that point (the same for every allocator: the floor); used_bytes and
// reserved_bytes: the allocator's own figures. The warm-up replay starts
// from a trimmed pool, so the curve shows growth too. Sampling happens only
// there: timed replays never read figures. The file is truncated when this
// process first writes to it, so give each process its own
// (sova_bench_torch runs once per allocator mode). tools/plot_bench.py
// --replay-memory FILE... draws it.
#pragma once

#include "memory_now.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sova_bench {

struct TimelineSample {
  std::size_t op = 0;
  std::uint64_t requested = 0;
  MemoryNow now;
};

/// Operations between samples for a trace of `ops` operations:
/// replay_options().memory_every, or else ops / 1000 (at least 1).
std::size_t timeline_every(std::size_t ops);

/// True when memory over time was asked for and this process has not yet
/// written the (trace, allocator) pair.
bool timeline_wanted(const std::string& trace, const char* allocator);

/// Appends the pair's samples to the file; throws std::runtime_error when it
/// cannot be written.
void timeline_write(const std::string& trace, const char* allocator, const char* label,
                    const std::vector<TimelineSample>& samples);

}  // namespace sova_bench
