// The trace replay's RMM-log parser (bench/replay/trace.hpp): the synthetic
// traces of test/trace/synthetic/, gzip input, and every kind of row it
// leaves out, counts or refuses.
#include "support/catch.hpp"

#include "trace.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef SOVA_TRACE_ZLIB
#define SOVA_TRACE_ZLIB 0  // test/trace/meson.build sets 1 when it finds zlib
#endif
#if SOVA_TRACE_ZLIB
#include <zlib.h>
#endif

using sova_bench::Trace;
using sova_bench::TraceError;
using sova_bench::TraceOp;

namespace {

const std::string kDir = SOVA_TEST_TRACE_DIR;

std::vector<std::uint64_t> flat(const Trace& t) {  // ops as bytes, slot, stream triples
  std::vector<std::uint64_t> v;
  for (const TraceOp& op : t.ops) v.insert(v.end(), {op.bytes, op.slot, op.stream});
  return v;
}

void check_two_streams(const Trace& t) {
  const std::vector<std::uint64_t> want = {
      1048576, 0, 0,  // allocate 0x7f0000000000 on the legacy stream
      4096,    1, 0,  //
      2097152, 2, 1,  // on stream 0x5555
      0,       0, 0,  // free of the first
      524288,  0, 1,  // its address again, in its freed slot
      0,       2, 0,  // freed on another stream than its allocation
      3145728, 2, 1,  //
      0,       0, 1,  //
      0,       1, 0,  // closing frees, in slot order, on the allocating stream
      0,       2, 1,
  };
  CHECK(flat(t) == want);
  CHECK(t.streams == std::vector<std::uint64_t>{0, 0x5555});
  CHECK(t.slots == 3);
  CHECK(t.peak_requested == 4096 + 524288 + 3145728);
  CHECK(t.allocations == 5);
  CHECK(t.frees == 3);
  CHECK(t.closing_frees == 2);
  CHECK(t.failed_allocations == 1);
  CHECK(t.ignored_rows == 1);  // the free of (nil)
  CHECK(t.unknown_frees == 0);
  CHECK(t.threads == 2);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A path under the temporary directory, removed when the object goes.
struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("sova_trace_test_" + std::to_string(getpid()) + "_" + name)) {}
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

Trace parse(const std::string& text) { return sova_bench::parse_trace(text, "test.csv"); }

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("trace: the synthetic two-stream trace", "[trace]") {
  check_two_streams(sova_bench::load_trace(kDir + "/synthetic_two_streams.csv"));
}

TEST_CASE("trace: frees of pointers that are not live are counted, not replayed", "[trace]") {
  const Trace t = sova_bench::load_trace(kDir + "/synthetic_bad_unknown_free.csv");
  CHECK(t.unknown_frees == 2);  // one never allocated, one freed twice
  CHECK(t.first_unknown_free == "line 3: free of 0x2000");
  CHECK(flat(t) == std::vector<std::uint64_t>{256, 0, 0, 0, 0, 0});
  CHECK(t.frees == 1);
}

TEST_CASE("trace: gzip-compressed traces", "[trace]") {
  const std::string text = read_text(kDir + "/synthetic_two_streams.csv");
  REQUIRE(!text.empty());
  TempFile file("two's streams.csv.gz");  // a quote in the name: the gzip -dc path must quote it
#if SOVA_TRACE_ZLIB
  CHECK(sova_bench::trace_zlib_built());
  gzFile gz = gzopen(file.path.c_str(), "wb");
  REQUIRE(gz != nullptr);
  REQUIRE(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(gz) == Z_OK);
#else
  CHECK_FALSE(sova_bench::trace_zlib_built());
  TempFile plain("two_streams_plain.csv");
  std::ofstream(plain.path) << text;
  const std::string command = "gzip -c < \"" + plain.path.string() + "\" > \"" + file.path.string() + "\"";
  REQUIRE(std::system(command.c_str()) == 0);
#endif
  check_two_streams(sova_bench::load_trace(file.path.string()));
  std::ofstream(file.path) << "not gzip";
  CHECK_THROWS_AS(sova_bench::load_trace(file.path.string()), TraceError);
}

TEST_CASE("trace: columns in any order, optional ones missing, other spellings", "[trace]") {
  SECTION("no Thread, Time or Stream column: all on the legacy stream") {
    const Trace t = parse("Action,Size,Pointer\nallocate,100,7f00\nfree,100,0x7f00\n");
    CHECK(flat(t) == std::vector<std::uint64_t>{100, 0, 0, 0, 0, 0});
    CHECK(t.streams == std::vector<std::uint64_t>{0});
    CHECK(t.threads == 0);
  }
  SECTION("deallocate, decimal streams, cudaStreamLegacy (1) as the legacy stream, CRLF, blank lines") {
    const Trace t = parse(
        "Thread,Time,Action,Pointer,Size,Stream\r\n"
        "\r\n"
        "1,t,allocate,0x10,8,1\r\n"
        "1,t,allocate,0x20,8,4096\r\n"
        "1,t,deallocate,0x10,8,0x1000\r\n"
        "1,t,free,0x20,8,(nil)\r\n");
    CHECK(flat(t) == std::vector<std::uint64_t>{8, 0, 0, 8, 1, 1, 0, 0, 1, 0, 1, 0});
    CHECK(t.streams == std::vector<std::uint64_t>{0, 4096});
  }
  SECTION("0-byte allocations and their frees are left out and counted") {
    const Trace t = parse("Action,Pointer,Size\nallocate,0x40,0\nfree,0x40,0\nallocate,(nil),0\n");
    CHECK(t.ops.empty());
    CHECK(t.ignored_rows == 3);
    CHECK(t.allocations == 0);
  }
}

TEST_CASE("trace: malformed files throw TraceError naming the line", "[trace]") {
  CHECK(error_of("") == "test.csv: empty, no header");
  CHECK(error_of("Thread,Time,Action,Pointer,Stream\n").find("no Size column") != std::string::npos);
  CHECK(error_of("Action,Pointer,Size\nallocate,0x10\n") == "test.csv:2: row has 2 fields, want 3");
  CHECK(error_of("Action,Pointer,Size\nallocate,0xZZ,1\n") == "test.csv:2: bad pointer '0xZZ'");
  CHECK(error_of("Action,Pointer,Size\nallocate,0x10,-1\n") == "test.csv:2: bad size '-1'");
  CHECK(error_of("Action,Pointer,Size,Stream\nallocate,0x10,1,0xq\n") == "test.csv:2: bad stream '0xq'");
  CHECK(error_of("Action,Pointer,Size\nreallocate,0x10,1\n") == "test.csv:2: unknown action 'reallocate'");
  CHECK(error_of("Action,Pointer,Size\nallocate,0x10,1\n\nallocate,0x10,2\n") ==
        "test.csv:4: 0x10 allocated again without a free in between");
  CHECK_THROWS_AS(sova_bench::load_trace(kDir + "/no_such_trace.csv"), TraceError);
}

TEST_CASE("trace: trace names of file names", "[trace]") {
  CHECK(sova_bench::trace_name_of("gpt_train.csv.gz") == "gpt_train");
  CHECK(sova_bench::trace_name_of("gpt_train.csv") == "gpt_train");
  CHECK(sova_bench::trace_name_of("README.md") == "");
  CHECK(sova_bench::trace_name_of(".csv") == "");
  CHECK(sova_bench::trace_name_of("x.csv.gz.bak") == "");
}
