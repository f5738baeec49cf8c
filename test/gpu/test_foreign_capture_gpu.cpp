// Captures sova does not know, on the GPU, through the C API
// (docs/graphs.md, "Captures sova does not know"): a global-mode capture of a
// plain kernel on a stream sova never saw, begun before a sova call that must
// complete frees made on another stream, ended after it. The capture must
// stay valid where every pending free has a fence (a free of a granule or
// more records one): a trim, an out-of-memory retry, a pool's destruction and
// the release worker wait for events then, never for a device. The
// simulation's twins are test/core/test_foreign_captures.cpp; this is what
// the real driver says of the calls they make (unmaps, event waits) while a
// global capture runs. Suite 'gpu'.
#include "gpu/spin_kernel.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>

using sova::gputest::launch_spin;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr unsigned long long kBusyNs = 20'000'000;  // work still reading a block when it is freed

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

/// A global-mode capture of one kernel on a stream of its own. end() returns
/// cudaStreamEndCapture's result and launches the graph once where it is valid.
class ForeignCapture {
 public:
  ForeignCapture() : stream_(make_stream()) {
    REQUIRE(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal) == cudaSuccess);
    REQUIRE(launch_spin(stream_, 1000) == cudaSuccess);
  }
  ~ForeignCapture() {
    cudaStreamIsCapturing(stream_, &status_);
    if (status_ != cudaStreamCaptureStatusNone) (void)end();
    cudaStreamDestroy(stream_);
  }
  ForeignCapture(const ForeignCapture&) = delete;
  ForeignCapture& operator=(const ForeignCapture&) = delete;

  cudaError_t end() {
    cudaGraph_t graph = nullptr;
    const cudaError_t result = cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) {
      cudaGraphExec_t exec = nullptr;
      if (result == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
        CHECK(cudaGraphLaunch(exec, stream_) == cudaSuccess);
        CHECK(cudaStreamSynchronize(stream_) == cudaSuccess);
        cudaGraphExecDestroy(exec);
      }
      cudaGraphDestroy(graph);
    }
    cudaGetLastError();  // an invalidated capture leaves its error behind
    return result;
  }

 private:
  cudaStream_t stream_;
  cudaStreamCaptureStatus status_ = cudaStreamCaptureStatusNone;
};

sovaMemPool_t make_pool(std::size_t max_size, std::uint64_t release_threshold) {
  int device = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  sovaMemPoolProps props{};
  props.device = device;
  props.maxSize = max_size;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &release_threshold) == cudaSuccess);
  return pool;
}

std::uint64_t reserved(sovaMemPool_t pool) {
  std::uint64_t value = ~0ull;
  REQUIRE(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &value) == cudaSuccess);
  return value;
}

/// Allocates `bytes` on `s`, keeps `s` busy past the free, frees on `s`: a
/// pending free of a granule or more, which records a fence.
void free_behind_work(sovaMemPool_t pool, std::size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, bytes, pool, s) == cudaSuccess);
  REQUIRE(launch_spin(s, kBusyNs) == cudaSuccess);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
}

}  // namespace

TEST_CASE("foreign capture on the GPU: a trim whose pending frees have fences leaves it valid",
          "[gpu][capi][graphs][foreign_capture]") {
  sovaMemPool_t pool = make_pool(0, ~std::uint64_t{0});  // only the trim releases
  cudaStream_t s = make_stream();
  free_behind_work(pool, 8 * kMiB, s);
  {
    ForeignCapture capture;
    CHECK(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    CHECK(capture.end() == cudaSuccess);
  }
  CHECK(reserved(pool) == 0);  // the trim waited for the fence and released
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("foreign capture on the GPU: an out-of-memory retry whose pending frees have fences leaves it valid",
          "[gpu][capi][graphs][foreign_capture]") {
  sovaMemPool_t pool = make_pool(32 * kMiB, ~std::uint64_t{0});
  cudaStream_t a = make_stream();
  cudaStream_t b = make_stream();
  free_behind_work(pool, 24 * kMiB, a);
  void* again = nullptr;
  {
    ForeignCapture capture;
    // b needs a's memory: the pool is at its limit, a's free still pending.
    CHECK(sovaMallocFromPoolAsync(&again, 24 * kMiB, pool, b) == cudaSuccess);
    CHECK(capture.end() == cudaSuccess);
  }
  REQUIRE(again != nullptr);
  REQUIRE(cudaMemsetAsync(again, 0x3c, 24 * kMiB, b) == cudaSuccess);
  REQUIRE(sovaFreeAsync(again, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("foreign capture on the GPU: destroying a pool whose pending frees have fences leaves it valid",
          "[gpu][capi][graphs][foreign_capture]") {
  sovaMemPool_t pool = make_pool(0, 0);
  cudaStream_t s = make_stream();
  free_behind_work(pool, 8 * kMiB, s);
  {
    ForeignCapture capture;
    CHECK(sovaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(capture.end() == cudaSuccess);
  }
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("foreign capture on the GPU: the release worker beside a quiet stream's frees leaves it valid",
          "[gpu][capi][graphs][foreign_capture][release]") {
  sovaMemPool_t pool = make_pool(0, 0);  // release threshold 0: the worker releases what it can
  cudaStream_t quiet = make_stream();
  void* small[3] = {};
  for (void*& p : small) REQUIRE(sovaMallocFromPoolAsync(&p, kMiB, pool, quiet) == cudaSuccess);
  for (void* p : small) REQUIRE(sovaFreeAsync(p, quiet) == cudaSuccess);  // small: no fence of their own
  free_behind_work(pool, 16 * kMiB, quiet);                               // large: fenced
  {
    ForeignCapture capture;
    // The stream turns inactive after ~200 ms; the worker looks every 20 ms.
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    CHECK(capture.end() == cudaSuccess);
  }
  REQUIRE(cudaStreamSynchronize(quiet) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(quiet) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
