// replay/ — memory over time, written as CSV (see timeline.hpp).
#include "timeline.hpp"

#include "catalog.hpp"

#include <cstdio>
#include <set>
#include <stdexcept>
#include <utility>

namespace sova_bench {
namespace {

std::set<std::pair<std::string, std::string>>& written() {
  static std::set<std::pair<std::string, std::string>> pairs;
  return pairs;
}

}  // namespace

std::size_t timeline_every(std::size_t ops) {
  if (replay_options().memory_every != 0) return replay_options().memory_every;
  return ops / 1000 > 0 ? ops / 1000 : 1;
}

bool timeline_wanted(const std::string& trace, const char* allocator) {
  return !replay_options().memory_out.empty() && written().count({trace, allocator}) == 0;
}

void timeline_write(const std::string& trace, const char* allocator, const char* label,
                    const std::vector<TimelineSample>& samples) {
  const std::string& path = replay_options().memory_out;
  const bool first = written().empty();
  std::FILE* f = std::fopen(path.c_str(), first ? "w" : "a");
  if (f == nullptr) throw std::runtime_error("replay: cannot write " + path);
  if (first) std::fputs("trace,allocator,label,op,requested_bytes,used_bytes,reserved_bytes\n", f);
  for (const TimelineSample& s : samples) {
    std::fprintf(f, "%s,%s,%s,%zu,%llu,%llu,%llu\n", trace.c_str(), allocator, label, s.op,
                 static_cast<unsigned long long>(s.requested), static_cast<unsigned long long>(s.now.used),
                 static_cast<unsigned long long>(s.now.reserved));
  }
  const bool ok = std::fflush(f) == 0;
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("replay: error writing " + path);
  written().emplace(trace, allocator);
}

}  // namespace sova_bench
