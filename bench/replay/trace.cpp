// replay/ — the RMM replay log parser (see trace.hpp).
#include "trace.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#ifndef SOVA_TRACE_ZLIB
#define SOVA_TRACE_ZLIB 0  // set to 1 by Meson when it finds zlib
#endif
#if SOVA_TRACE_ZLIB
#include <zlib.h>
#endif

namespace sova_bench {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool parse_number(std::string_view s, int base, std::uint64_t& out) {
  if (s.empty()) return false;
  const auto [end, err] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return err == std::errc() && end == s.data() + s.size();
}

bool is_null_text(std::string_view s) { return s.empty() || s == "(nil)"; }

// Pointer: always hex (RMM writes %p), with or without 0x.
bool parse_pointer(std::string_view s, std::uint64_t& out) {
  if (is_null_text(s)) {
    out = 0;
    return true;
  }
  if (s.substr(0, 2) == "0x" || s.substr(0, 2) == "0X") s.remove_prefix(2);
  return parse_number(s, 16, out);
}

// Stream: RMM prints the handle as a pointer (0 or 0x...); other writers may
// print decimal. Only its identity matters, and 0/1 being the legacy stream.
bool parse_stream(std::string_view s, std::uint64_t& out) {
  if (is_null_text(s)) {
    out = 0;
    return true;
  }
  if (s.substr(0, 2) == "0x" || s.substr(0, 2) == "0X") return parse_number(s.substr(2), 16, out);
  return parse_number(s, 10, out) || parse_number(s, 16, out);
}

std::string hex(std::uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// Splits one CSV line on commas (the format has no quoting).
void split(std::string_view line, std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = line.find(',', start);
    fields.push_back(trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) return;
    start = comma + 1;
  }
}

constexpr std::size_t kMissing = static_cast<std::size_t>(-1);

struct Columns {
  std::size_t thread = kMissing, action = kMissing, pointer = kMissing, size = kMissing, stream = kMissing;
  std::size_t needed = 0;  // fields a row must have: highest index used + 1
};

Columns read_header(std::string_view line, const std::string& origin) {
  std::vector<std::string_view> names;
  split(line, names);
  Columns c;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::size_t* slot = nullptr;
    if (names[i] == "Thread") slot = &c.thread;
    if (names[i] == "Action") slot = &c.action;
    if (names[i] == "Pointer") slot = &c.pointer;
    if (names[i] == "Size") slot = &c.size;
    if (names[i] == "Stream") slot = &c.stream;
    if (slot != nullptr) *slot = i;
  }
  for (const auto& [index, name] : {std::pair{c.action, "Action"}, {c.pointer, "Pointer"}, {c.size, "Size"}}) {
    if (index == kMissing) {
      throw TraceError(origin + ":1: no " + name +
                       " column in the header (want Thread,Time,Action,Pointer,Size,Stream)");
    }
  }
  for (std::size_t index : {c.thread, c.action, c.pointer, c.size, c.stream}) {
    if (index != kMissing) c.needed = std::max(c.needed, index + 1);
  }
  return c;
}

// Builds the Trace row by row.
class Builder {
 public:
  explicit Builder(const std::string& origin) : origin_(origin) {}

  void allocate(std::size_t line, std::uint64_t ptr, std::uint64_t bytes, std::uint32_t stream) {
    if (ptr == 0 || bytes == 0) {
      ++trace_.ignored_rows;
      if (ptr != 0) ignored_.insert(ptr);
      return;
    }
    ignored_.erase(ptr);
    std::uint32_t slot;
    if (free_slots_.empty()) {
      slot = static_cast<std::uint32_t>(trace_.slots++);
    } else {
      slot = free_slots_.back();
      free_slots_.pop_back();
    }
    if (!live_.emplace(ptr, Live{slot, bytes, stream}).second) {
      throw TraceError(origin_ + ":" + std::to_string(line) + ": " + hex(ptr) +
                       " allocated again without a free in between");
    }
    trace_.ops.push_back({bytes, slot, stream});
    ++trace_.allocations;
    live_bytes_ += bytes;
    trace_.peak_requested = std::max(trace_.peak_requested, live_bytes_);
  }

  void free(std::size_t line, std::uint64_t ptr, std::uint32_t stream) {
    if (ptr == 0 || ignored_.erase(ptr) != 0) {
      ++trace_.ignored_rows;
      return;
    }
    const auto it = live_.find(ptr);
    if (it == live_.end()) {
      if (trace_.unknown_frees++ == 0) {
        trace_.first_unknown_free = "line " + std::to_string(line) + ": free of " + hex(ptr);
      }
      return;
    }
    trace_.ops.push_back({0, it->second.slot, stream});
    ++trace_.frees;
    live_bytes_ -= it->second.bytes;
    free_slots_.push_back(it->second.slot);
    live_.erase(it);
  }

  std::uint32_t stream_index(std::uint64_t handle) {
    if (handle == 0 || handle == 1) return 0;  // the legacy stream (1 = cudaStreamLegacy)
    const auto [it, added] = stream_ids_.try_emplace(handle, static_cast<std::uint32_t>(trace_.streams.size()));
    if (added) trace_.streams.push_back(handle);
    return it->second;
  }

  void failure() { ++trace_.failed_allocations; }

  void thread(std::string_view id) { threads_.emplace(id); }

  Trace finish() {
    std::vector<Live> left;
    left.reserve(live_.size());
    for (const auto& [ptr, live] : live_) left.push_back(live);
    std::sort(left.begin(), left.end(), [](const Live& a, const Live& b) { return a.slot < b.slot; });
    for (const Live& live : left) trace_.ops.push_back({0, live.slot, live.stream});
    trace_.closing_frees = left.size();
    trace_.threads = threads_.size();
    return std::move(trace_);
  }

 private:
  struct Live {
    std::uint32_t slot;
    std::uint64_t bytes;
    std::uint32_t stream;  // the allocating stream: where a closing free goes
  };
  const std::string& origin_;
  Trace trace_;
  std::unordered_map<std::uint64_t, Live> live_;
  std::unordered_set<std::uint64_t> ignored_;                    // non-null pointers of 0-byte allocations
  std::unordered_map<std::uint64_t, std::uint32_t> stream_ids_;  // handle -> index, not the legacy stream
  std::unordered_set<std::string> threads_;
  std::vector<std::uint32_t> free_slots_;
  std::uint64_t live_bytes_ = 0;
};

}  // namespace

Trace parse_trace(std::string_view text, const std::string& origin) {
  Builder builder(origin);
  Columns columns;
  bool have_header = false;
  std::vector<std::string_view> fields;
  std::size_t line_number = 0;
  while (!text.empty()) {
    const std::size_t newline = text.find('\n');
    const std::string_view line = trim(text.substr(0, newline));
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    ++line_number;
    if (line.empty()) continue;
    if (!have_header) {
      columns = read_header(line, origin);
      have_header = true;
      continue;
    }
    const auto where = [&] { return origin + ":" + std::to_string(line_number) + ": "; };
    split(line, fields);
    if (fields.size() < columns.needed) {
      throw TraceError(where() + "row has " + std::to_string(fields.size()) + " fields, want " +
                       std::to_string(columns.needed));
    }
    std::uint64_t ptr = 0, bytes = 0, stream = 0;
    if (!parse_pointer(fields[columns.pointer], ptr)) {
      throw TraceError(where() + "bad pointer '" + std::string(fields[columns.pointer]) + "'");
    }
    if (!parse_number(fields[columns.size], 10, bytes)) {
      throw TraceError(where() + "bad size '" + std::string(fields[columns.size]) + "'");
    }
    if (columns.stream != kMissing && !parse_stream(fields[columns.stream], stream)) {
      throw TraceError(where() + "bad stream '" + std::string(fields[columns.stream]) + "'");
    }
    if (columns.thread != kMissing) builder.thread(fields[columns.thread]);
    const std::string_view action = fields[columns.action];
    if (action == "allocate") {
      builder.allocate(line_number, ptr, bytes, builder.stream_index(stream));
    } else if (action == "free" || action == "deallocate") {
      builder.free(line_number, ptr, builder.stream_index(stream));
    } else if (action == "allocate failure") {
      builder.failure();  // nothing was allocated: the recorded run failed here
    } else {
      throw TraceError(where() + "unknown action '" + std::string(action) + "'");
    }
  }
  if (!have_header) throw TraceError(origin + ": empty, no header");
  return builder.finish();
}

namespace {

#if SOVA_TRACE_ZLIB
std::string read_file(const std::string& path) {
  // gzread passes a file that is not gzip through unchanged: one path for both.
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw TraceError(path + ": cannot open");
  gzbuffer(file, 1 << 18);
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const int n = gzread(file, buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      throw TraceError(path + ": " + message);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  gzclose(file);
  return text;
}
#else
// Without zlib a .gz file goes through the gzip program, which any machine
// this runs on has: a build that lacks zlib's headers still reads the
// recorded traces.
std::string read_file(const std::string& path) {
  if (!ends_with(path, ".gz")) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw TraceError(path + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw TraceError(path + ": read error");
    return text.str();
  }
  std::string quoted = "'";
  for (const char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  std::FILE* pipe = popen(("gzip -dc -- " + quoted + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) throw TraceError(path + ": cannot run gzip -dc (built without zlib)");
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  if (pclose(pipe) != 0) throw TraceError(path + ": gzip -dc failed (built without zlib, .gz is read through gzip)");
  return text;
}
#endif

}  // namespace

Trace load_trace(const std::string& path) { return parse_trace(read_file(path), path); }

bool trace_zlib_built() { return SOVA_TRACE_ZLIB != 0; }

std::string trace_name_of(std::string_view file_name) {
  for (std::string_view suffix : {std::string_view(".csv"), std::string_view(".csv.gz")}) {
    if (ends_with(file_name, suffix) && file_name.size() > suffix.size()) {
      return std::string(file_name.substr(0, file_name.size() - suffix.size()));
    }
  }
  return "";
}

}  // namespace sova_bench
