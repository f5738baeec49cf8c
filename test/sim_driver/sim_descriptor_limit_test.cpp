// Issue 17: the simulation's one memfd per chunk meets the process's
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
  std::vector<PhysicalHandle> chunks;
  for (int i = 0; i < 512; ++i) {
    PhysicalHandle h = 0;
    const cudaError_t error = sim.physical_create(0, config.granularity, &h);
    if (error == cudaSuccess) {
      chunks.push_back(h);
      continue;
    }
    if (error == cudaErrorMemoryAllocation) return kFalseOutOfMemory;
    if (error != cudaErrorOperatingSystem) return kWrongError;
    // A pool on the same simulation: granules it cannot create are that error too.
    PoolOptions options;
    options.driver = &sim;
    options.max_chunk = config.granularity;
    Pool pool(options);
    void* p = nullptr;
    const cudaError_t pool_error = pool.try_allocate(&p, 4 * config.granularity, nullptr);
    for (PhysicalHandle c : chunks) sim.physical_release(c);
    return pool_error == cudaErrorOperatingSystem && p == nullptr ? kOk : kPoolWrong;
  }
  return kNeverHit;
}

}  // namespace

TEST_CASE("sim: running out of descriptors for chunks is its own error, not out of memory",
          "[sim_driver][issue17]") {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(in_child());
  REQUIRE(pid > 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kOk);
}
