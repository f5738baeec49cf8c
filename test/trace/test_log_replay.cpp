// The allocation log (sovaLogStart / sovaLogStop, lib/core/alloc_log.*): what
// it writes is RMM's CSV, and the bench's replay parser (bench/replay/trace.cpp)
// reads it back as a trace with every allocation paired with its free, also
// when threads free what other threads allocated and buffers flush mid-run.
// Runs sova::Pool on its own SimDriver (no process-wide state but the log).
#include "support/catch.hpp"

#include "trace.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>
#include <sova/sova.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif
#else
constexpr bool kThreadSanitizer = false;
#endif

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() /
          ("sova_log_test_" + std::to_string(::getpid()) + "_" + name + ".csv"))
      .string();
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  for (std::string f; std::getline(ss, f, ',');) out.push_back(f);
  return out;
}

/// "HH:MM:SS.ffffff" as microseconds of the day.
long long micros(const std::string& t) {
  int h = 0, m = 0, s = 0, us = 0;
  REQUIRE(std::sscanf(t.c_str(), "%d:%d:%d.%d", &h, &m, &s, &us) == 4);
  return ((h * 60LL + m) * 60 + s) * 1000000 + us;
}

/// Stops the log if a test left it on, so one failure does not fail the rest.
struct LogGuard {
  ~LogGuard() { (void)sovaLogStop(); }
};

}  // namespace

TEST_CASE("log: cross-thread frees come out after their allocations, and the replay parser reads the log", "[log]") {
  LogGuard guard;
  sova::SimDriver sim;
  sova::PoolOptions options;
  options.driver = &sim;
  options.release_threshold = UINT64_MAX;  // reserved memory stays put while idle (the release worker)
  sova::Pool pool(options);
  const std::string path = temp_path("threads");
  REQUIRE(sovaLogStart(path.c_str()) == cudaSuccess);

  // Four threads, each on its own stream, each freeing what the previous
  // one allocated (through a queue), many times the per-thread buffer's
  // 4096 records so that flushes happen while others append.
  constexpr int kThreads = 4;
  constexpr int kPerThread = 12000;
  std::vector<cudaStream_t> streams;
  for (int i = 0; i < kThreads; ++i) streams.push_back(sim.create_stream());
  std::mutex mutex;
  std::vector<std::deque<void*>> queues(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        void* p = nullptr;
        if (pool.try_allocate(&p, 512 + 512 * static_cast<std::size_t>((i * 7 + t) % 16), streams[t]) != cudaSuccess) {
          ++failures;
          continue;
        }
        void* mine = nullptr;
        {
          std::lock_guard lock(mutex);
          queues[(t + 1) % kThreads].push_back(p);
          if (!queues[t].empty()) {
            mine = queues[t].front();
            queues[t].pop_front();
          }
        }
        if (mine != nullptr && pool.try_deallocate(mine, streams[t]) != cudaSuccess) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (void* p : queues[t]) CHECK(pool.try_deallocate(p, streams[t]) == cudaSuccess);
  }
  // A pair on the legacy stream, then, after a sample (every 10 ms), the same
  // pair again (served from the stream's cache: reserved memory unchanged):
  // its rows carry the pool's reserved memory.
  pool.deallocate(pool.allocate(4096, nullptr), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const std::uint64_t reserved_now = pool.stats().reserved_current;
  pool.deallocate(pool.allocate(4096, nullptr), nullptr);
  CHECK(pool.stats().reserved_current == reserved_now);
  REQUIRE(sovaLogStop() == cudaSuccess);
  CHECK(failures == 0);

  const std::vector<std::string> lines = read_lines(path);
  REQUIRE(lines.size() == 1 + 2 * (kThreads * kPerThread + 2));
  CHECK(lines[0] == "Thread,Time,Action,Pointer,Size,Stream,Reserved");
  long long previous = -1;
  bool ordered = true;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto f = fields(lines[i]);
    REQUIRE(f.size() == 7);
    const long long t = micros(f[1]);
    if (t < previous) ordered = false;
    previous = t;
  }
  CHECK(ordered);
  const auto last_row = fields(lines.back());
  CHECK(last_row[2] == "free");
  CHECK(last_row[5] == "0");  // the legacy stream, as RMM prints a null handle
  CHECK(std::stoull(last_row[6]) == reserved_now);
  CHECK(reserved_now > 0);

  const sova_bench::Trace trace = sova_bench::load_trace(path);
  CHECK(trace.allocations == kThreads * kPerThread + 2);
  CHECK(trace.frees == kThreads * kPerThread + 2);
  CHECK(trace.unknown_frees == 0);
  CHECK(trace.closing_frees == 0);
  CHECK(trace.failed_allocations == 0);
  CHECK(trace.threads == kThreads + 1);         // the four and the main thread
  CHECK(trace.streams.size() == kThreads + 1);  // the legacy stream and the four
  for (cudaStream_t s : streams) {
    sim.stream_synchronize(s);
    sim.destroy_stream(s);
  }
  std::remove(path.c_str());
}

TEST_CASE("log: sizes, a failed allocation, and nothing after stop", "[log]") {
  LogGuard guard;
  sova::SimDriver sim;
  sova::PoolOptions options;
  options.driver = &sim;
  options.max_size = std::size_t{64} << 20;
  sova::Pool pool(options);
  const std::string path = temp_path("rows");
  REQUIRE(sovaLogStart(path.c_str()) == cudaSuccess);
  void* a = pool.allocate(1000, nullptr);
  void* b = nullptr;
  CHECK(pool.try_allocate(&b, std::size_t{1} << 30, nullptr) == cudaErrorMemoryAllocation);
  CHECK(pool.try_deallocate(a, nullptr) == cudaSuccess);
  CHECK(pool.try_deallocate(a, nullptr) == cudaErrorInvalidValue);  // refused: not logged
  REQUIRE(sovaLogStop() == cudaSuccess);
  void* c = pool.allocate(2000, nullptr);  // after stop: not logged
  pool.deallocate(c, nullptr);

  const std::vector<std::string> lines = read_lines(path);
  REQUIRE(lines.size() == 4);
  const auto alloc = fields(lines[1]), failure = fields(lines[2]), free = fields(lines[3]);
  CHECK(alloc[2] == "allocate");
  CHECK(alloc[4] == "1000");
  CHECK(failure[2] == "allocate failure");
  CHECK(failure[3] == "(nil)");
  CHECK(failure[4] == std::to_string(std::size_t{1} << 30));
  CHECK(free[2] == "free");
  CHECK(free[3] == alloc[3]);
  CHECK(free[4] == "1000");
  char expected[32];
  std::snprintf(expected, sizeof expected, "%p", a);
  CHECK(alloc[3] == expected);
  std::remove(path.c_str());
}

TEST_CASE("log: bad input is refused and changes nothing", "[log]") {
  LogGuard guard;
  CHECK(sovaLogStart(nullptr) == cudaErrorInvalidValue);
  CHECK(sovaLogStart("") == cudaErrorInvalidValue);
  CHECK(sovaLogStart("/nonexistent-sova-dir/log.csv") == cudaErrorInvalidValue);
  CHECK(sovaLogStop() == cudaSuccess);  // none running: nothing to do

  const std::string first = temp_path("first"), second = temp_path("second");
  REQUIRE(sovaLogStart(first.c_str()) == cudaSuccess);
  CHECK(sovaLogStart(second.c_str()) == cudaErrorInvalidValue);  // one log at a time
  CHECK_FALSE(std::filesystem::exists(second));
  sova::SimDriver sim;
  sova::PoolOptions options;
  options.driver = &sim;
  sova::Pool pool(options);
  pool.deallocate(pool.allocate(512, nullptr), nullptr);
  REQUIRE(sovaLogStop() == cudaSuccess);
  CHECK(sovaLogStop() == cudaSuccess);
  CHECK(read_lines(first).size() == 3);  // the first log kept going
  std::remove(first.c_str());
}

TEST_CASE("log: a forked child stops logging and can start its own; the parent's log goes on", "[log]") {
  LogGuard guard;
  sova::SimDriver sim;
  sova::PoolOptions options;
  options.driver = &sim;
  sova::Pool pool(options);
  const std::string parent = temp_path("parent"), child = temp_path("child");
  REQUIRE(sovaLogStart(parent.c_str()) == cudaSuccess);
  pool.deallocate(pool.allocate(512, nullptr), nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The child: no Catch2 here. Its log is off (stop: nothing to do), and a
    // log of its own starts and stops with a writer thread of its own
    // (ThreadSanitizer refuses new threads after a multi-threaded fork: there
    // the child only stops).
    bool ok = sovaLogStop() == cudaSuccess;
    if (!kThreadSanitizer) ok = ok && sovaLogStart(child.c_str()) == cudaSuccess && sovaLogStop() == cudaSuccess;
    ::_exit(ok ? 0 : 1);
  }
  int status = -1;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  pool.deallocate(pool.allocate(1024, nullptr), nullptr);
  REQUIRE(sovaLogStop() == cudaSuccess);
  CHECK(read_lines(parent).size() == 5);                        // header and two pairs
  if (!kThreadSanitizer) CHECK(read_lines(child).size() == 1);  // header only
  std::remove(parent.c_str());
  std::remove(child.c_str());
}
