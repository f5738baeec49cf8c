// What the allocation log (sovaLogStart, SOVA_LOG) costs: the pair/ and
// threads/ loops on sova::Pool with the log on, against the same loops on
// SovaPool (log off) in the same run:
//   pair/sova_pool_logged/<bytes>
//   threads/sova_pool_logged/threads:T
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

/// SovaPool with the log on for as long as any instance lives (the threads/
/// loop builds one per thread, all before the timed loop starts and all
/// destroyed after it ends, so the count covers the whole loop).
struct SovaPoolLogged : SovaPool {
  static constexpr const char* kName = "sova_pool_logged";
  SovaPoolLogged() {
    if (!why_not.empty()) return;
    std::lock_guard lock(mutex());
    if (count()++ == 0) {
      const char* path = std::getenv("SOVA_BENCH_LOG");
      if (sovaLogStart(path != nullptr && *path != '\0' ? path : "/dev/null") != cudaSuccess) {
        --count();
        why_not = "sovaLogStart failed (SOVA_BENCH_LOG not writable?)";
      }
    }
  }
  ~SovaPoolLogged() {
    if (!why_not.empty()) return;
    std::lock_guard lock(mutex());
    if (--count() == 0 && sovaLogStop() != cudaSuccess) std::fputs("sova_bench: sovaLogStop failed\n", stderr);
  }
  SovaPoolLogged(const SovaPoolLogged&) = delete;
  SovaPoolLogged& operator=(const SovaPoolLogged&) = delete;

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static int& count() {
    static int n = 0;
    return n;
  }
};

[[maybe_unused]] const bool registered = [] {
  register_pair<SovaPoolLogged>();
  register_threads<SovaPoolLogged>();
  return true;
}();

}  // namespace
}  // namespace sova_bench
