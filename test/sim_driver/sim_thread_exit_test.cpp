// A host thread's per-thread stream is drained and its
// worker joined when the thread exits (lib/driver/sim/sim_streams.hpp). It
// was closed and left for a later stream create or destroy to join, so the
// worker of the last thread to exit — the main thread's, at exit — was never
// joined, and `tools/run-tests --sanitize=thread` failed on ThreadSanitizer's
// thread-leak reports (capi_c and sim). Here the same is seen without TSan:
// when the thread's join returns, its stream's work has run and no worker is
// left behind.
#include "support/catch.hpp"

#include <sova/sim.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

using namespace sova;
using namespace std::chrono_literals;

namespace {

/// The process's thread count, from /proc/self/status.
int threads_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

}  // namespace

TEST_CASE("sim: a thread's exit drains its per-thread stream and joins its worker", "[sim_driver][issue17]") {
  SimDriver sim;
  sim.launch(cudaStreamLegacy, [] {});  // the legacy stream's worker, started before the count
  REQUIRE(sim.stream_synchronize(cudaStreamLegacy) == cudaSuccess);
  const int before = threads_now();
  REQUIRE(before > 0);
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> ran{false};
    std::thread([&] {
      sim.delay(cudaStreamPerThread, 30ms);
      sim.launch(cudaStreamPerThread, [&] { ran = true; });
    }).join();
    CHECK(ran.load());               // drained before the thread was gone
    CHECK(threads_now() == before);  // and no worker left running
  }
}
