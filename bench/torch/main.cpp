// sova_bench_torch — PyTorch's CUDA caching allocator on the workloads
// sova_bench runs: pair/ (pair.hpp), multistream/ (multistream.hpp), random/
// (random_allocs.hpp), replay/ (replay/replay.hpp). Case names are those of
// sova_bench with allocator torch_caching or torch_expandable, so that
// tools/plot_bench.py can put the programs' JSON side by side. Built only
// where meson found PyTorch (bench/torch/meson.build); every case needs a GPU.
//
//   sova_bench_torch [--expandable] [--trace_dir=DIR ...] [Google Benchmark flags]
//
// One allocator mode per process (torch_allocator.hpp says why): without
// --expandable the torch_caching cases, with it the torch_expandable ones.
// --expandable makes PyTorch's settings variable ask for
// expandable_segments:True, re-executing the program when it did not
// (PyTorch reads it once, when it loads). Either way the program then checks
// what the allocator does (torch_mode_error); the JSON context records it
// (torch_expandable_segments: true or false), and the exit status is 1 when
// the allocator did not run in the process's mode.
#include "../multistream.hpp"
#include "../pair.hpp"
#include "../random_allocs.hpp"
#include "../replay/replay.hpp"
#include "../threads_mixed.hpp"
#include "torch_allocator.hpp"

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef SOVA_TORCH_VERSION
#define SOVA_TORCH_VERSION "unknown"
#endif

namespace {

constexpr const char* kExpandableFlag = "--expandable";
constexpr const char* kExpandableSetting = "expandable_segments:True";
constexpr const char* kReexecGuard = "SOVA_BENCH_TORCH_REEXEC";

template <class A>
void register_cases(const std::vector<sova_bench::TraceFile>& traces) {
  sova_bench::register_pair<A>();
  sova_bench::register_multistream<A>();
  sova_bench::register_random<A>(10000);
  sova_bench::register_replay<A>(traces);
  sova_bench::register_threads_mixed<A>();
}

bool asks_for_expandable(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strstr(value, kExpandableSetting) != nullptr;
}

// PyTorch >= 2.9 reads PYTORCH_ALLOC_CONF, and PYTORCH_CUDA_ALLOC_CONF only
// when that is unset; older versions read PYTORCH_CUDA_ALLOC_CONF. Appends
// expandable_segments:True to PYTORCH_CUDA_ALLOC_CONF (and to
// PYTORCH_ALLOC_CONF when it is set) where it is not there yet, and then
// re-executes this program, so that PyTorch reads it as it loads. Returns ""
// when nothing had to change, else (exec failed) why.
std::string ensure_expandable_env(char** argv) {
  bool changed = false;
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    if (value == nullptr && std::strcmp(name, "PYTORCH_ALLOC_CONF") == 0) continue;
    if (asks_for_expandable(name)) continue;
    const std::string setting =
        value != nullptr && *value != '\0' ? std::string(value) + "," + kExpandableSetting : kExpandableSetting;
    if (setenv(name, setting.c_str(), 1) != 0) return std::string("setenv ") + name + ": " + std::strerror(errno);
    changed = true;
  }
  if (!changed) return "";
  if (std::getenv(kReexecGuard) != nullptr) return "re-executed once already, and still no expandable_segments:True";
  setenv(kReexecGuard, "1", 1);
  std::fprintf(stderr, "sova_bench_torch: re-executing with PYTORCH_CUDA_ALLOC_CONF=%s\n",
               std::getenv("PYTORCH_CUDA_ALLOC_CONF"));
  std::fflush(stderr);
  execv("/proc/self/exe", argv);
  return std::string("cannot re-execute /proc/self/exe: ") + std::strerror(errno);
}

std::string alloc_conf() {
  std::string s;
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    if (!s.empty()) s += " ";
    s += std::string(name) + "=" + value;
  }
  return s.empty() ? "unset" : s;
}

}  // namespace

int main(int argc, char** argv) {
  bool expandable = false;
  for (int i = 1; i < argc; ++i) expandable = expandable || std::strcmp(argv[i], kExpandableFlag) == 0;
  if (expandable) {
    const std::string error = ensure_expandable_env(argv);  // returns only if nothing changed, or on failure
    if (!error.empty()) {
      std::fprintf(stderr, "sova_bench_torch: %s\n", error.c_str());
      return 2;
    }
  }
  int kept = 1;  // --expandable is ours, not Google Benchmark's
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], kExpandableFlag) != 0) argv[kept++] = argv[i];
  }
  argv[kept] = nullptr;
  argc = kept;

  sova_bench::take_replay_flags(argc, argv);  // --trace_dir etc. (replay/catalog.hpp)
  const std::vector<sova_bench::TraceFile> traces = sova_bench::find_traces();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  sova_bench::set_torch_expandable(expandable);
  if (expandable) {
    register_cases<sova_bench::TorchExpandable>(traces);
  } else {
    register_cases<sova_bench::TorchCaching>(traces);
  }

  // Before any case: the allocator is made and probed here (with a GPU).
  const std::string seen = sova_bench::torch_expandable_seen();
  benchmark::AddCustomContext("gpu", sova_bench::device_name());
  benchmark::AddCustomContext("torch_version", SOVA_TORCH_VERSION);
  benchmark::AddCustomContext("torch_allocator", sova_bench::torch_allocator_name() + ", expandable_segments " + seen);
  benchmark::AddCustomContext("torch_expandable_segments", seen);
  benchmark::AddCustomContext("torch_alloc_conf", alloc_conf());
  benchmark::AddCustomContext("torch_mode", expandable ? "torch_expandable" : "torch_caching");
  benchmark::AddCustomContext("replay_traces", sova_bench::describe_traces(traces));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  if (!sova_bench::have_gpu()) return 0;
  int status = 0;
  for (const std::string& error : {sova_bench::torch_mode_error(), sova_bench::torch_release_error()}) {
    if (error.empty()) continue;
    std::fprintf(stderr, "sova_bench_torch: %s\n", error.c_str());
    status = 1;
  }
  return status;
}
