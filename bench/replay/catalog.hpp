// replay/ — where the trace replay finds its traces, what else it was asked
// for, and each trace parsed once per process.
//
// Flags (taken out of argv before Google Benchmark sees them; each has an
// environment variable, which the flag overrides):
//
//   --trace_dir=DIR             $SOVA_TRACE_DIR; default: bench/traces/ of the
//                               source tree this program was built from
//                               (compile definition SOVA_BENCH_TRACE_DIR)
//   --replay_memory_out=FILE    $SOVA_REPLAY_MEMORY; write memory over time to
//                               FILE (CSV, timeline.hpp); default: none
//   --replay_memory_every=N     $SOVA_REPLAY_MEMORY_EVERY; one sample every N
//                               operations; default 0: about 1000 per trace
//
// Traces are the files named <name>.csv or <name>.csv.gz in that directory
// (trace.hpp); <name> is the trace's name in the case names. Cases are
// registered from the file names alone; a file is read the first time a case
// needs it, and kept (all allocators' cases replay the same Trace).
#pragma once

#include "trace.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace sova_bench {

struct ReplayOptions {
  std::string trace_dir;
  std::string memory_out;        ///< empty: no memory over time
  std::size_t memory_every = 0;  ///< 0: chosen per trace (timeline.hpp)
};

/// Reads the flags above out of argv, removing them, and the environment.
/// Call once, before benchmark::Initialize. Exits with status 2 and a message
/// on a malformed value.
void take_replay_flags(int& argc, char** argv);

/// What take_replay_flags found (defaults until it is called).
const ReplayOptions& replay_options();

struct TraceFile {
  std::string name;  ///< "gpt_train"
  std::string path;  ///< ".../gpt_train.csv.gz"
};

/// The trace files in replay_options().trace_dir, sorted by name. A missing
/// directory gives none; of two files with one name (x.csv and x.csv.gz) the
/// first in file-name order is taken, and the other named on stderr.
std::vector<TraceFile> find_traces();

/// "<dir>: N traces" (and, in a build without zlib, that .gz files are read
/// through gzip -dc), for the JSON context.
std::string describe_traces(const std::vector<TraceFile>& traces);

/// `file` parsed (load_trace), once per process. A file that failed throws
/// the same TraceError again at every call. Not thread-safe: cases run one at
/// a time.
const Trace& cached_trace(const TraceFile& file);

}  // namespace sova_bench
