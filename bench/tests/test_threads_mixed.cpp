// The benchmark loops themselves, run through Google Benchmark on an allocator
// that checks what it is given: a loop that frees a pointer it does not hold
// is the benchmark's bug, not the allocator's.
//
// threads_mixed/ failed on sova_pool_sim with "cannot free ...: not a live
// block of this pool": GCC 12 compiled the loop's
//   live[s.slot] = a.allocate(...); benchmark::DoNotOptimize(live[s.slot]);
// without the store into live[] (Google Benchmark 1.7's DoNotOptimize(T&) is
// an asm "+m,r" operand; the bounds check of _GLIBCXX_ASSERTIONS, which Meson
// sets, was needed too), so each slot kept the pointer it had freed and freed
// it again. The pool was right to refuse; this allocator refuses the same.
#include "../threads_mixed.hpp"

#include "support/catch.hpp"

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace sova_bench {
namespace {

// What the recorder saw, over every instance (run_case makes one per run).
struct Ledger {
  std::mutex mutex;
  std::set<std::uintptr_t> live;
  std::uintptr_t next = 0x10000;  // never reused: a stale pointer is never live again
  std::uint64_t allocations = 0;
  std::uint64_t frees = 0;
  std::vector<std::string> problems;
};
Ledger& ledger() {
  static Ledger l;
  return l;
}

// The allocator shape of allocators.hpp; hands out fresh addresses (never
// dereferenced) and throws, as sova::Pool does, on a pointer it has not got live.
struct Recorder {
  static constexpr const char* kName = "recorder";
  std::string why_not;
  const char* label = "sim";
  sova::SimDriver* sim = &shared_sim();
  void* allocate(std::size_t bytes, cudaStream_t stream);
  void deallocate(void* ptr, cudaStream_t stream);
};

// Out of line, as the real allocators' calls are.
[[gnu::noinline]] void* Recorder::allocate(std::size_t bytes, cudaStream_t) {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  const std::uintptr_t p = l.next;
  l.next += (bytes + 4095) / 4096 * 4096 + 4096;
  l.live.insert(p);
  ++l.allocations;
  return reinterpret_cast<void*>(p);
}

[[gnu::noinline]] void Recorder::deallocate(void* ptr, cudaStream_t) {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  ++l.frees;
  if (l.live.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
    const std::string problem =
        "freed a pointer it does not hold: " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr));
    if (l.problems.size() < 8) l.problems.push_back(problem);
    throw std::runtime_error(problem);  // as sova::Pool: the case stops with an error
  }
}

// Prints nothing: the test reads the ledger.
class QuietReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

TEST_CASE("threads_mixed/ frees only the pointers it holds", "[bench]") {
  // The warm-up pass and more than a schedule of timed iterations, on one
  // thread and on two (a window each).
  benchmark::RegisterBenchmark("threads_mixed/recorder", BM_threads_mixed<Recorder>)
      ->ArgName("classes")
      ->Arg(16)
      ->Arg(64)
      ->Threads(1)
      ->Threads(2)
      ->Iterations(static_cast<benchmark::IterationCount>(kMixedSchedule + 1000))
      ->UseRealTime();
  QuietReporter reporter;
  const std::size_t ran = benchmark::RunSpecifiedBenchmarks(&reporter, "threads_mixed/recorder");
  CHECK(ran == 4);
  Ledger& l = ledger();
  for (const std::string& problem : l.problems) UNSCOPED_INFO(problem);
  CHECK(l.problems.empty());
  CHECK(l.allocations > 4 * (kMixedWindow + kMixedSchedule));
  CHECK(l.frees == l.allocations);  // each run frees its window at the end
  CHECK(l.live.empty());
}

}  // namespace sova_bench
