// replay/ — an allocation trace in RMM's replay log format, parsed into the
// operations a replay issues. No CUDA and no Google Benchmark here: the
// parser is tested on its own (test/trace/).
//
// The format is what rmm::mr::logging_resource_adaptor writes and RMM's
// REPLAY_BENCHMARK reads: a CSV whose header names the columns
//
//   Thread,Time,Action,Pointer,Size,Stream
//
// (in any order; Action, Pointer and Size are required, Stream is 0 where it
// is missing, Thread only counted, Time not read: rows replay in file order).
//   Action   `allocate`, `free` (also `deallocate`), `allocate failure`
//   Pointer  hex, with or without 0x; `(nil)`, 0 or empty is null
//   Size     decimal bytes
//   Stream   the stream's handle: 0x-prefixed hex, plain decimal, or `(nil)`
//
// What the parser makes of the rows:
//   - each allocation gets a slot of the replay's pointer table (slots freed
//     by the trace are reused, so the table is as long as the most blocks
//     live at once); the trace's pointer values only pair frees with their
//     allocations and are not used after parsing;
//   - stream handles 0 and 1 (cudaStreamLegacy) are the legacy default
//     stream, id 0; every other handle is a stream of its own, numbered in
//     order of first appearance (Trace::streams);
//   - a free is issued on the stream its row names, which may differ from the
//     stream the block was allocated on;
//   - `allocate failure` rows, allocations of 0 bytes or at a null pointer,
//     frees of those, and frees of a null pointer are left out and counted;
//   - a free of a pointer that is not live (never allocated in the trace, or
//     already freed) is left out and counted in unknown_frees: the trace does
//     not say what it freed (typically a block allocated before logging
//     began). Whether such a trace may be replayed is the caller's choice;
//     the benchmark refuses it;
//   - blocks still live at the end get closing frees on the stream they were
//     allocated on, appended in slot order, so that every replay ends with
//     nothing held and the next one starts alike.
// A malformed file (no header, a missing column, a row with too few fields, an
// unknown action, a number that does not parse, a pointer allocated twice
// without a free between) throws TraceError naming the file and line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sova_bench {

/// A file that cannot be read or parsed; what() names the file and line.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One operation of a replay.
struct TraceOp {
  std::uint64_t bytes;   ///< > 0: allocate `bytes` into `slot`; 0: free what `slot` holds
  std::uint32_t slot;    ///< index into the replay's pointer table
  std::uint32_t stream;  ///< index into Trace::streams
};

struct Trace {
  std::vector<TraceOp> ops;
  /// The trace's stream handles by index; 0 is the legacy default stream.
  /// Index 0 is always present (the stream of closing frees when none else).
  std::vector<std::uint64_t> streams{0};
  std::size_t slots = 0;               ///< most blocks live at once
  std::uint64_t peak_requested = 0;    ///< most bytes live at once
  std::size_t allocations = 0;         ///< allocate rows replayed
  std::size_t frees = 0;               ///< free rows replayed
  std::size_t closing_frees = 0;       ///< frees appended for blocks live at the end
  std::size_t unknown_frees = 0;       ///< free rows of pointers not live, left out
  std::string first_unknown_free;      ///< "line N: free of 0x..." for the first of them
  std::size_t failed_allocations = 0;  ///< `allocate failure` rows, left out
  std::size_t ignored_rows = 0;        ///< null or 0-byte allocations and their frees, null frees
  std::size_t threads = 0;             ///< distinct Thread values (0 without the column)
};

/// Parses the whole text of a trace; `origin` (a file name) prefixes errors.
Trace parse_trace(std::string_view text, const std::string& origin);

/// Reads `path` and parses it. Throws TraceError. A name ending in .gz is
/// gzip-compressed: read through zlib where the build has it, else through
/// the gzip program (gzip -dc).
Trace load_trace(const std::string& path);

/// True when this build reads .gz files with zlib (Meson found it), false
/// when it runs gzip -dc for them.
bool trace_zlib_built();

/// The trace name of a file name: "gpt_train" for "gpt_train.csv" or
/// "gpt_train.csv.gz"; "" for any other file name.
std::string trace_name_of(std::string_view file_name);

}  // namespace sova_bench
