// What the allocation log (sovaLogStart, SOVA_LOG) costs: the pair/ and
// threads/ loops on sova::Pool with the log on, against the same loops on
// SovaPool (log off) in the same run:
//   pair/sova_pool_logged/<bytes>
//   threads/sova_pool_logged/threads:T
//   pair/sova_pool_sim_logged/<bytes>   (against pair/sova_pool_sim: on the
//                                        host simulation, runs without a GPU)
// The log goes to $SOVA_BENCH_LOG, default /dev/null: every row is still
// stamped, buffered, sorted, formatted and written (one write per batch), but
// no disk is timed (a real file grows ~60 bytes a row, 2 rows a pair: tens of
// MB per second of a case).
#include "pair.hpp"
#include "threads.hpp"

#include <sova/sova.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

namespace sova_bench {
namespace {

/// The log on for as long as any LogSession lives (the threads/ loop builds
/// one allocator per thread, all before the timed loop starts and all
/// destroyed after it ends, so the count covers the whole loop).
class LogSession {
 public:
  LogSession() {
    std::lock_guard lock(mutex());
    if (count() == 0) {
      const char* path = std::getenv("SOVA_BENCH_LOG");
      if (sovaLogStart(path != nullptr && *path != '\0' ? path : "/dev/null") != cudaSuccess) {
        failed_ = true;
        return;
      }
    }
    ++count();
  }
  ~LogSession() {
    if (failed_) return;
    std::lock_guard lock(mutex());
    if (--count() == 0 && sovaLogStop() != cudaSuccess) std::fputs("sova_bench: sovaLogStop failed\n", stderr);
  }
  LogSession(const LogSession&) = delete;
  LogSession& operator=(const LogSession&) = delete;
  bool failed() const { return failed_; }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& count() {
    static int n = 0;
    return n;
  }
  bool failed_ = false;
};

constexpr const char* kLogFailed = "sovaLogStart failed (SOVA_BENCH_LOG not writable?)";

struct SovaPoolLogged : SovaPool {
  static constexpr const char* kName = "sova_pool_logged";
  LogSession log;
  SovaPoolLogged() {
    if (why_not.empty() && log.failed()) why_not = kLogFailed;
  }
};

struct SovaPoolSimLogged : SovaPoolSim {
  static constexpr const char* kName = "sova_pool_sim_logged";
  LogSession log;
  SovaPoolSimLogged() {
    if (why_not.empty() && log.failed()) why_not = kLogFailed;
  }
};

[[maybe_unused]] const bool registered = [] {
  register_pair<SovaPoolLogged>();
  register_threads<SovaPoolLogged>();
  register_pair<SovaPoolSimLogged>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
