// replay/ — flags, trace files and the parsed-trace cache (see catalog.hpp).
#include "catalog.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string_view>
#include <system_error>
#include <variant>

#ifndef SOVA_BENCH_TRACE_DIR
#define SOVA_BENCH_TRACE_DIR "bench/traces"  // Meson passes the source tree's; relative otherwise
#endif

namespace sova_bench {
namespace {

ReplayOptions& options() {
  static ReplayOptions o{SOVA_BENCH_TRACE_DIR, "", 0};
  return o;
}

[[noreturn]] void bad_value(const char* name, std::string_view value) {
  std::fprintf(stderr, "replay: %s: '%.*s' is not a count\n", name, static_cast<int>(value.size()), value.data());
  std::exit(2);
}

std::size_t parse_count(const char* name, std::string_view value) {
  std::size_t n = 0;
  const auto [end, err] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (err != std::errc() || end != value.data() + value.size()) bad_value(name, value);
  return n;
}

}  // namespace

void take_replay_flags(int& argc, char** argv) {
  ReplayOptions& o = options();
  if (const char* v = std::getenv("SOVA_TRACE_DIR"); v != nullptr && *v != '\0') o.trace_dir = v;
  if (const char* v = std::getenv("SOVA_REPLAY_MEMORY"); v != nullptr) o.memory_out = v;
  if (const char* v = std::getenv("SOVA_REPLAY_MEMORY_EVERY"); v != nullptr && *v != '\0') {
    o.memory_every = parse_count("SOVA_REPLAY_MEMORY_EVERY", v);
  }
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value_of = [&arg](std::string_view flag) -> const char* {
      return arg.substr(0, flag.size()) == flag ? arg.data() + flag.size() : nullptr;
    };
    if (const char* v = value_of("--trace_dir=")) {
      o.trace_dir = v;
    } else if (const char* v = value_of("--replay_memory_out=")) {
      o.memory_out = v;
    } else if (const char* v = value_of("--replay_memory_every=")) {
      o.memory_every = parse_count("--replay_memory_every", v);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argv[kept] = nullptr;
  argc = kept;
}

const ReplayOptions& replay_options() { return options(); }

std::vector<TraceFile> find_traces() {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(replay_options().trace_dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().filename().string());
  }
  std::sort(files.begin(), files.end());
  std::vector<TraceFile> traces;
  for (const std::string& file : files) {
    const std::string name = trace_name_of(file);
    if (name.empty()) continue;
    const auto same =
        std::find_if(traces.begin(), traces.end(), [&name](const TraceFile& t) { return t.name == name; });
    if (same != traces.end()) {
      std::fprintf(stderr, "replay: %s: trace '%s' is already %s; ignored\n", file.c_str(), name.c_str(),
                   same->path.c_str());
      continue;
    }
    traces.push_back({name, (fs::path(replay_options().trace_dir) / file).string()});
  }
  std::sort(traces.begin(), traces.end(), [](const TraceFile& a, const TraceFile& b) { return a.name < b.name; });
  return traces;
}

std::string describe_traces(const std::vector<TraceFile>& traces) {
  std::string s =
      replay_options().trace_dir + ": " + std::to_string(traces.size()) + " trace" + (traces.size() == 1 ? "" : "s");
  if (!trace_zlib_built()) s += " (built without zlib: .csv.gz traces are read through gzip -dc)";
  return s;
}

const Trace& cached_trace(const TraceFile& file) {
  // A parsed trace, or the message of the TraceError that parsing threw.
  static std::map<std::string, std::variant<std::unique_ptr<Trace>, std::string>> cache;
  auto it = cache.find(file.path);
  if (it == cache.end()) {
    try {
      it = cache.emplace(file.path, std::make_unique<Trace>(load_trace(file.path))).first;
    } catch (const TraceError& e) {
      it = cache.emplace(file.path, std::string(e.what())).first;
    }
  }
  if (const auto* error = std::get_if<std::string>(&it->second)) throw TraceError(*error);
  return *std::get<std::unique_ptr<Trace>>(it->second);
}

}  // namespace sova_bench
