// The simulation's one memfd per chunk meets the process's
// descriptor limit (RLIMIT_NOFILE). That is an explicit limit of the
// simulation (include/sova/sim.hpp): physical_create returns
// cudaErrorOperatingSystem, never a false out of memory, and a pool fails the
// allocation with that error. Tried in a forked child, whose limit is lowered
// to 64 descriptors (the parent's is left alone).
#include "sim_driver/sim_test_util.hpp"
#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <sys/resource.h>

#include <vector>

using namespace sova;

namespace {

// Child exit codes.
enum : int { kOk = 0, kNoLimit = 10, kFalseOutOfMemory = 11, kWrongError = 12, kPoolWrong = 13, kNeverHit = 14 };

int in_child() {
  rlimit limit{64, 64};
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) return kNoLimit;
  SimConfig config;
  config.total_memory = std::size_t{1} << 30;  // 512 chunks of 2 MiB: far more than 64 descriptors
  SimDriver sim(config);
  // The pool is made while descriptors are left: sanitizer runtimes need some
  // of their own (UBSan's checks open a pipe), so the table is kept full only
  // for the moments under test.
  PoolOptions options;
  options.driver = &sim;
  options.max_chunk = config.granularity;  // one chunk per granule
  Pool pool(options);
  std::vector<PhysicalHandle> chunks;
  cudaError_t error = cudaSuccess;
  while (chunks.size() < 512) {
    PhysicalHandle h = 0;
    error = sim.physical_create(0, config.granularity, &h);
    if (error != cudaSuccess) break;
    chunks.push_back(h);
  }
  int result = kOk;
  if (error == cudaSuccess)
    result = kNeverHit;
  else if (error == cudaErrorMemoryAllocation)
    result = kFalseOutOfMemory;
  else if (error != cudaErrorOperatingSystem)
    result = kWrongError;
  if (result == kOk && chunks.size() >= 8) {
    // Eight descriptors free; the pool needs sixteen chunks: the ninth is refused.
    for (int i = 0; i < 8; ++i) {
      sim.physical_release(chunks.back());
      chunks.pop_back();
    }
    void* p = nullptr;
    const cudaError_t pool_error = pool.try_allocate(&p, 16 * config.granularity, nullptr);
    if (pool_error != cudaErrorOperatingSystem || p != nullptr) result = kPoolWrong;
  }
  for (PhysicalHandle c : chunks) sim.physical_release(c);
  return result;
}

}  // namespace

TEST_CASE("sim: running out of descriptors for chunks is its own error, not out of memory", "[sim_driver][issue17]") {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(in_child());
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kOk);
}
