#include "budget/budget_table.hpp"

#include "budget/budget_source_root.hpp"  // SOVA_BUDGET_SOURCE_ROOT (configure_file)

#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

namespace sova::budget {

namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t`");
  if (first == std::string::npos) return "";
  const auto last = s.find_last_not_of(" \t`");
  return s.substr(first, last - first + 1);
}

std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {  // past the leading '|'
    if (line[i] == '|') {
      out.push_back(trim(cur));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return out;
}

bool known_kind(const std::string& name) {
  for (std::size_t i = 0; i < kSimCallKinds; ++i) {
    if (name == sim_call_name(static_cast<SimCall>(i))) return true;
  }
  return false;
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

/// "N", "N/M" or "≤N/ms" (also "<=N/ms") into `*rate`; false for anything else.
bool parse_rate(std::string text, Rate* rate) {
  for (const std::string at_most : {"\u2264", "<="}) {
    if (text.rfind(at_most, 0) == 0) {
      text = text.substr(at_most.size());
      const std::string per_ms = "/ms";
      if (text.size() <= per_ms.size() || text.compare(text.size() - per_ms.size(), per_ms.size(), per_ms) != 0) {
        return false;
      }
      text.resize(text.size() - per_ms.size());
      if (!is_number(text) || std::stoul(text) == 0) return false;
      *rate = Rate{Rate::Per::ms, std::stoul(text), 1};
      return true;
    }
  }
  const auto slash = text.find('/');
  const std::string calls = text.substr(0, slash);
  const std::string pairs = slash == std::string::npos ? "1" : text.substr(slash + 1);
  if (!is_number(calls) || !is_number(pairs) || std::stoul(calls) == 0 || std::stoul(pairs) == 0) return false;
  *rate = Rate{Rate::Per::pairs, std::stoul(calls), std::stoul(pairs)};
  return true;
}

bool parse_calls(const std::string& cell, Calls* calls, std::string* error) {
  if (cell == "none") return true;
  std::stringstream items(cell);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::stringstream words(item);
    std::string name;
    std::string rate_text;
    std::string extra;
    words >> name >> rate_text >> extra;
    name = trim(name);
    if (!known_kind(name)) {
      *error = "'" + name + "' is no driver call kind (sova::SimCall)";
      return false;
    }
    Rate rate;
    if (!parse_rate(rate_text, &rate) || !extra.empty() || calls->count(name) != 0) {
      // Appended to a std::string, not a literal + a temporary: GCC 12's
      // -Wrestrict misreads that form (a false positive, an error under --werror).
      *error = std::string("'").append(trim(item)).append("' is not 'kind N', 'kind N/M' or 'kind \u2264N/ms' (each kind once)");
      return false;
    }
    (*calls)[name] = rate;
  }
  return true;
}

std::string format_rate(const Rate& rate) {
  // Appended, not literal + temporary (GCC 12's -Wrestrict false positive: parse_calls).
  if (rate.per == Rate::Per::ms) return std::string("\u2264").append(std::to_string(rate.calls)).append("/ms");
  std::string out = std::to_string(rate.calls);
  if (rate.pairs != 1) out.append("/").append(std::to_string(rate.pairs));
  return out;
}

}  // namespace

std::vector<Row> parse_table(const std::string& markdown, std::string* error) {
  std::stringstream in(markdown);
  std::string line;
  bool heading = false;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0 && line.find("Driver calls per pair") != std::string::npos) {
      heading = true;
      break;
    }
  }
  if (!heading) {
    *error = "no heading 'Driver calls per pair'";
    return {};
  }
  while (std::getline(in, line) && line.rfind("| configuration", 0) != 0) {
    if (line.rfind("#", 0) == 0) break;  // the next section: no table in this one
  }
  if (line.rfind("| configuration", 0) != 0) {
    *error = "no table ('| configuration | ...') under 'Driver calls per pair'";
    return {};
  }
  std::getline(in, line);  // | --- | --- | --- |
  std::vector<Row> rows;
  std::set<std::string> seen;
  while (std::getline(in, line) && line.rfind("|", 0) == 0) {
    const std::vector<std::string> c = cells(line);
    Row row;
    std::string why;
    if (c.size() < 3 || c[0].empty() || !parse_calls(c[1], &row.calls, &why) || c[2].empty()) {
      *error = "row '" + line + "': " + (why.empty() ? "needs a configuration, its calls and why" : why);
      return {};
    }
    row.configuration = c[0];
    if (!seen.insert(row.configuration).second) {
      *error = "configuration '" + row.configuration + "' appears twice";
      return {};
    }
    rows.push_back(std::move(row));
  }
  if (rows.empty()) *error = "the table under 'Driver calls per pair' has no rows";
  return rows;
}

std::string design_md() {
  std::ifstream in(std::string(SOVA_BUDGET_SOURCE_ROOT) + "/docs/design.md");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string format(const Calls& calls) {
  std::string out;
  for (const auto& [name, rate] : calls) {
    if (!out.empty()) out += ", ";
    out += name + " " + format_rate(rate);
  }
  return out.empty() ? "none" : out;
}

Calls as_exact(const Counted& counted) {
  Calls calls;
  for (std::size_t i = 0; i < kSimCallKinds; ++i) {
    const std::size_t n = counted.counts[i];
    if (n == 0) continue;
    const std::size_t common = std::gcd(n, counted.pairs);
    calls[sim_call_name(static_cast<SimCall>(i))] = Rate{Rate::Per::pairs, n / common, counted.pairs / common};
  }
  return calls;
}

std::string departures(const Calls& row, const Counted& counted) {
  std::string out;
  auto depart = [&](const std::string& phrase) { out += (out.empty() ? "" : "; ") + phrase; };
  // A time-driven call may come once its interval passed, at any moment of
  // the loop: the milliseconds begun count, and one more for an interval that
  // was running when the loop began.
  const std::size_t ms = static_cast<std::size_t>(counted.elapsed_ns / 1'000'000) + 2;
  for (std::size_t i = 0; i < kSimCallKinds; ++i) {
    const std::string name = sim_call_name(static_cast<SimCall>(i));
    const std::size_t n = counted.counts[i];
    const auto it = row.find(name);
    if (it == row.end()) {
      if (n != 0) depart(name + ": " + std::to_string(n) + " in " + std::to_string(counted.pairs) + " pairs, none allowed");
      continue;
    }
    const Rate& rate = it->second;
    if (rate.per == Rate::Per::ms) {
      if (n > rate.calls * ms) {
        depart(name + ": " + std::to_string(n) + " in " + std::to_string(counted.elapsed_ns / 1000) + " us, more than " +
               format_rate(rate));
      }
    } else if (counted.pairs % rate.pairs != 0) {
      depart(name + ": " + std::to_string(counted.pairs) + " pairs measured, no multiple of " + format_rate(rate) + "'s " +
             std::to_string(rate.pairs));
    } else if (n != rate.calls * (counted.pairs / rate.pairs)) {
      depart(name + ": " + std::to_string(n) + " in " + std::to_string(counted.pairs) + " pairs, " + format_rate(rate) +
             " allows " + std::to_string(rate.calls * (counted.pairs / rate.pairs)));
    }
  }
  return out;
}

std::string compare(const std::vector<Row>& table, const std::vector<Measured>& measured, const std::string& prefix) {
  std::ostringstream diff;
  std::map<std::string, const Row*> by_name;
  for (const Row& row : table) {
    if (row.configuration.rfind(prefix, 0) == 0) by_name[row.configuration] = &row;
  }
  for (const Measured& m : measured) {
    const auto it = by_name.find(m.configuration);
    if (it == by_name.end()) {
      diff << "`" << m.configuration << "`: measured " << format(as_exact(m.counted)) << "; no row in the table\n";
      continue;
    }
    const std::string departed = departures(it->second->calls, m.counted);
    if (!departed.empty()) {
      diff << "`" << m.configuration << "`: table " << format(it->second->calls) << "; measured " << departed << "\n";
    }
    by_name.erase(it);
  }
  for (const auto& [name, row] : by_name) diff << "`" << name << "`: in the table, not measured\n";
  if (!diff.str().empty()) {
    diff << "measured, as the table's rows:\n";
    for (const Measured& m : measured) diff << "| `" << m.configuration << "` | " << format(as_exact(m.counted)) << " |\n";
  }
  return diff.str();
}

}  // namespace sova::budget
