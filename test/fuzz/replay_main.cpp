// Runs programs for the pool-operation interpreter without libFuzzer: the
// seed corpus (or any files: a crash libFuzzer saved, say), and programs of
// random bytes; on one thread, or on several sharing the pools (the
// ThreadSanitizer run). Any compiler; the test suites run it (test/fuzz/meson.build).
//
//   sova_fuzz_replay [--threads N] [--random K] [--seed S] [--length L]
//                    [--strict-foreign-captures] [--only K [--save FILE]] [FILE|DIR]...
//
// Each file is run single-threaded, and with --threads N also as N threads.
// --random K adds K programs of L bytes (default 1024) from seed S (default
// 1), run the same way. --strict-foreign-captures fails a program whose
// capture beside the pools (one that never touches sova) sova invalidated
// (interpreter.hpp, Options). --only K keeps the K-th random program alone
// (to run a failure again), --save FILE writes it out. SOVA_FUZZ_TRACE set
// in the environment: each program's name and each operation on stderr. Prints one line per failure and a summary;
// exits 1 if anything failed.
#include "fuzz/interpreter.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace {

struct Program {
  std::string name;
  std::vector<std::uint8_t> bytes;
};

void add_path(const std::filesystem::path& path, std::vector<Program>& out) {
  if (std::filesystem::is_directory(path)) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(path))
      if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) add_path(file, out);
    return;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "sova_fuzz_replay: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  out.push_back({path.string(), std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {})});
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0;
  long random_programs = 0;
  unsigned long seed = 1;
  std::size_t length = 1024;
  std::vector<Program> programs;
  sova::fuzz::Options options;
  long only = -1;    // --only K: of the random programs, only the K-th (0-based)
  std::string save;  // --save FILE: write that program's bytes there (a corpus entry)
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sova_fuzz_replay: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--threads")
      threads = std::atoi(value());
    else if (arg == "--random")
      random_programs = std::atol(value());
    else if (arg == "--seed")
      seed = std::strtoul(value(), nullptr, 10);
    else if (arg == "--only")
      only = std::atol(value());
    else if (arg == "--save")
      save = value();
    else if (arg == "--strict-foreign-captures")
      options.strict_foreign_captures = true;
    else if (arg == "--length")
      length = std::strtoull(value(), nullptr, 10);
    else
      add_path(arg, programs);
  }
  std::mt19937_64 rng(seed);
  for (long k = 0; k < random_programs; ++k) {
    Program p{"random #" + std::to_string(k) + " (seed " + std::to_string(seed) + ")",
              std::vector<std::uint8_t>(length)};
    for (auto& b : p.bytes) b = static_cast<std::uint8_t>(rng());
    if (only >= 0 && k != only) continue;
    if (!save.empty())
      std::ofstream(save, std::ios::binary)
          .write(reinterpret_cast<const char*>(p.bytes.data()), static_cast<std::streamsize>(p.bytes.size()));
    programs.push_back(std::move(p));
  }
  const bool trace = std::getenv("SOVA_FUZZ_TRACE") != nullptr;  // names each program, the interpreter each operation
  int failed = 0, runs = 0;
  for (const Program& p : programs) {
    auto attempt = [&](const char* how, auto run) {
      ++runs;
      if (trace) std::fprintf(stderr, "sova_fuzz_replay: %s (%s)\n", p.name.c_str(), how);
      try {
        run();
      } catch (const std::exception& e) {
        ++failed;
        std::printf("FAILED %s (%s): %s\n", p.name.c_str(), how, e.what());
      }
    };
    attempt("one thread", [&] { sova::fuzz::run_program(p.bytes.data(), p.bytes.size(), options); });
    if (threads > 0) {
      attempt("threads", [&] { sova::fuzz::run_program_threaded(p.bytes.data(), p.bytes.size(), threads, options); });
    }
  }
  const sova::fuzz::Counts c = sova::fuzz::counts();
  std::printf(
      "sova_fuzz_replay: %ld operations: %ld allocations (%ld failed), %ld frees, %ld bad frees refused, "
      "%ld pools made (%ld refused), %ld streams destroyed, %ld handoffs\n",
      c.operations, c.allocations, c.failed_allocations, c.frees, c.refused_frees, c.pools_made, c.pools_refused,
      c.streams_destroyed, c.handoffs);
  std::printf(
      "sova_fuzz_replay: %ld captures (%ld ended, %ld invalidated by a documented cause): %ld graph allocations "
      "(%ld failed), %ld frees in graphs, %ld earlier blocks' frees refused, %ld launches, %ld graphs released, "
      "%ld outputs freed, %ld memory-back checks\n",
      c.captures, c.captures_ended, c.captures_invalidated, c.graph_allocations, c.graph_failed_allocations,
      c.graph_frees, c.capture_frees_refused, c.graph_launches, c.graphs_released, c.output_frees,
      c.memory_back_checks);
  std::printf(
      "sova_fuzz_replay: %ld foreign captures: %ld ended, %ld invalidated (%ld with no device synchronize "
      "expected)\n",
      c.foreign_captures, c.foreign_ended, c.foreign_invalidated, c.foreign_invalidated_unexplained);
  std::printf(
      "sova_fuzz_replay: %ld sleeps (%ld failed, %ld cut short), %ld wakes (%ld failed), %ld frees and %ld "
      "allocations refused and %ld trims while asleep, %ld blocks checked after wake\n",
      c.sleeps, c.failed_sleeps, c.cut_short_sleeps, c.wakes, c.failed_wakes, c.frees_asleep, c.allocations_asleep,
      c.trims_asleep, c.blocks_restored);
  std::printf(
      "sova_fuzz_replay: %ld blocks checked zeroed after wake, %ld sleeps refused for the host budget, "
      "%ld host reserves and %ld releases\n",
      c.blocks_zeroed, c.budget_refusals, c.host_reserves, c.host_releases);
  std::printf(
      "sova_fuzz_replay: %ld frees on another thread during a wake (%ld blocks allocated again and checked), "
      "%ld releases after a growth that may fail midway, %ld reserves beyond the budget or 64 TiB, "
      "%ld rounds after a second stream\n",
      c.frees_during_wake, c.reallocated_after_wake, c.failed_growth_releases, c.huge_reserves, c.stream_rounds);
  std::printf("sova_fuzz_replay: %d runs of %zu programs, %d failed\n", runs, programs.size(), failed);
  return failed == 0 && runs > 0 ? 0 : 1;
}
