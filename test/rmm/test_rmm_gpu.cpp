// sova::RmmResource under RAPIDS RMM's own containers on a GPU (suite 'gpu';
// sova_rmm_gpu_tests, built with -Drmm_root and -Dgpu=enabled). Blocks are
// checked by kernels (test/support/cuda_test_device.cu): each is filled with
// a tag on its stream and checked later on that stream, after a busy kernel,
// so a block handed to another stream too early shows up as a wrong word.
#include "support/catch.hpp"
#include "support/test_device.hpp"

#include <sova/rmm.hpp>

#include <rmm/device_buffer.hpp>
#include <rmm/device_uvector.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/resource_ref.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <thread>
#include <vector>

using sova::PoolOptions;
using sova::RmmResource;
using sova::test::test_device;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

PoolOptions on_gpu(std::size_t max_size = 0) {
  PoolOptions options;
  options.driver = &sova::cuda_driver();
  options.max_size = max_size;
  return options;
}

struct Stream {
  cudaStream_t handle = nullptr;
  Stream() { REQUIRE(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(handle); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cuda::stream_ref ref() const { return cuda::stream_ref{handle}; }
};

bool aligned(const void* ptr, std::size_t alignment) { return reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0; }

}  // namespace

TEST_CASE("a CUDA GPU is present (the gpu suite never passes without one)", "[rmm][gpu]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(count > 0);
}

TEST_CASE("rmm::device_buffer on sova: contents, copies, resize, alignment, host data", "[rmm][gpu]") {
  RmmResource mr{on_gpu()};
  Stream a, b;
  test_device().reset_mismatches();
  {
    rmm::device_buffer buffer(kMiB, a.ref(), mr);
    CHECK(mr.pool().block_size(buffer.data()) == kMiB);
    CHECK(aligned(buffer.data(), rmm::CUDA_ALLOCATION_ALIGNMENT));
    test_device().fill(buffer.data(), kMiB, 0xB0FFE4u, a.handle);

    REQUIRE(cudaStreamSynchronize(a.handle) == cudaSuccess);
    rmm::device_buffer copy(buffer, b.ref(), mr);  // copied on b
    CHECK(mr.pool().contains(copy.data()));
    CHECK(copy.data() != buffer.data());
    test_device().expect(copy.data(), kMiB, 0xB0FFE4u, b.handle);

    buffer.resize(3 * kMiB, a.ref());  // a new block, the old contents copied into it
    CHECK(mr.pool().block_size(buffer.data()) == 3 * kMiB);
    test_device().expect(buffer.data(), kMiB, 0xB0FFE4u, a.handle);
    buffer.resize(kMiB / 2, a.ref());
    buffer.shrink_to_fit(a.ref());
    CHECK(mr.pool().block_size(buffer.data()) == kMiB / 2);
    test_device().expect(buffer.data(), kMiB / 2, 0xB0FFE4u, a.handle);

    // RMM's own alignment argument: honoured, and given back at the free.
    for (std::size_t alignment : {std::size_t{256}, std::size_t{4096}, std::size_t{65536}, 2 * kMiB}) {
      INFO("alignment " << alignment);
      rmm::device_buffer over(5000, alignment, a.ref(), mr);
      CHECK(over.alignment() == alignment);
      CHECK(aligned(over.data(), alignment));
      test_device().fill(over.data(), 5000 & ~std::size_t{3}, 0xA11u, a.handle);
      test_device().expect(over.data(), 5000 & ~std::size_t{3}, 0xA11u, a.handle);
    }

    // From host data, and back.
    std::vector<int> host(10000);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<int>(i * 7);
    rmm::device_buffer from_host(host.data(), host.size() * sizeof(int), a.ref(), mr);
    std::vector<int> back(host.size());
    REQUIRE(cudaMemcpyAsync(back.data(), from_host.data(), back.size() * sizeof(int), cudaMemcpyDeviceToHost,
                            a.handle) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(a.handle) == cudaSuccess);
    CHECK(back == host);
  }
  test_device().synchronize_device();
  CHECK(test_device().mismatches() == 0);
  CHECK(mr.pool().stats().used_current == 0);
  CHECK(mr.pool().stats().live_blocks == 0);
  mr.pool().check_invariants();
}

TEST_CASE("rmm::device_uvector on sova: elements, resize, a copy on another stream", "[rmm][gpu]") {
  RmmResource mr{on_gpu()};
  Stream a, b;
  {
    rmm::device_uvector<int> v(1000000, a.ref(), mr);
    CHECK(mr.pool().block_size(v.data()) == 1000000 * sizeof(int));
    REQUIRE(cudaMemsetAsync(v.data(), 0, v.size() * sizeof(int), a.handle) == cudaSuccess);
    v.set_element(10, 42, a.ref());
    v.set_element(999999, -5, a.ref());
    CHECK(v.element(10, a.ref()) == 42);
    CHECK(v.back_element(a.ref()) == -5);

    v.resize(2000000, a.ref());
    CHECK(v.size() == 2000000);
    CHECK(mr.pool().block_size(v.data()) == 2000000 * sizeof(int));
    CHECK(v.element(10, a.ref()) == 42);
    CHECK(v.element(999999, a.ref()) == -5);

    REQUIRE(cudaStreamSynchronize(a.handle) == cudaSuccess);
    rmm::device_uvector<int> w(v, b.ref(), mr);
    CHECK(mr.pool().contains(w.data()));
    CHECK(w.element(10, b.ref()) == 42);

    rmm::device_uvector<double> d(333, b.ref(), mr);  // alignof(double): sova's own
    d.set_element(332, 2.5, b.ref());
    CHECK(d.back_element(b.ref()) == 2.5);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(mr.pool().stats().used_current == 0);
  mr.pool().check_invariants();
}

TEST_CASE("set_current_device_resource(RmmResource): RMM's defaults allocate from sova", "[rmm][gpu]") {
  RmmResource mr{on_gpu()};
  Stream s;
  auto previous = rmm::mr::set_current_device_resource(mr);
  CHECK(rmm::mr::get_current_device_resource_ref() == rmm::device_async_resource_ref{mr});
  {
    rmm::device_buffer buffer(4096, s.ref());  // no resource named: the current one
    rmm::device_uvector<float> floats(1000, s.ref());
    CHECK(mr.pool().block_size(buffer.data()) == 4096);
    CHECK(mr.pool().block_size(floats.data()) == 1000 * sizeof(float));
    CHECK(mr.pool().stats().live_blocks == 2);
  }
  CHECK(mr.pool().stats().live_blocks == 0);
  (void)rmm::mr::set_current_device_resource(std::move(previous));
  CHECK(rmm::mr::get_current_device_resource_ref() != rmm::device_async_resource_ref{mr});
  rmm::device_buffer elsewhere(4096, s.ref());
  CHECK_FALSE(mr.pool().contains(elsewhere.data()));
}

TEST_CASE("RmmResource on several streams and threads: no block reused before its work is done", "[rmm][gpu]") {
  RmmResource mr{on_gpu()};
  test_device().reset_mismatches();
  constexpr int kThreads = 4;
  constexpr int kRounds = 150;
  std::vector<std::thread> threads;
  std::vector<cudaStream_t> streams(kThreads);
  for (cudaStream_t& s : streams) REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RmmResource mine = mr;  // a copy per thread, one pool
      std::mt19937 random(t);
      const cudaStream_t own = streams[t];
      const cudaStream_t next = streams[(t + 1) % kThreads];
      for (int round = 0; round < kRounds; ++round) {
        const std::size_t bytes = 4 * (1 + random() % (kMiB / 2));
        const std::size_t alignment = random() % 4 == 0 ? std::size_t{1} << (10 + random() % 8) : 256;
        const auto tag = static_cast<std::uint32_t>(t << 16 | round);
        rmm::device_buffer buffer(bytes, alignment, cuda::stream_ref{own}, mine);
        test_device().fill(buffer.data(), bytes, tag, own);
        test_device().busy(own, std::chrono::microseconds(20));
        test_device().expect(buffer.data(), bytes, tag, own);
        if (round % 3 == 0) {
          // Handed to the next stream, which frees it after its own use.
          cudaEvent_t done;
          cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
          cudaEventRecord(done, own);
          cudaStreamWaitEvent(next, done, 0);
          cudaEventDestroy(done);
          test_device().expect(buffer.data(), bytes, tag, next);
          buffer.set_stream(cuda::stream_ref{next});
        }
      }  // each buffer freed in stream order on its stream
    });
  }
  for (std::thread& t : threads) t.join();
  test_device().synchronize_device();
  CHECK(test_device().mismatches() == 0);
  const sova::PoolStats stats = mr.pool().stats();
  CHECK(stats.used_current == 0);
  CHECK(stats.allocations == kThreads * kRounds);
  mr.pool().check_invariants();
  for (cudaStream_t s : streams) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("allocate_sync waits for the default stream; deallocate_sync frees on it", "[rmm][gpu]") {
  RmmResource mr{on_gpu()};
  test_device().busy(cudaStream_t{}, std::chrono::microseconds(50000));
  void* p = mr.allocate_sync(kMiB);
  CHECK(cudaStreamQuery(cudaStream_t{}) == cudaSuccess);  // the busy kernel is done
  REQUIRE(cudaMemset(p, 0x5A, kMiB) == cudaSuccess);
  unsigned char last = 0;
  REQUIRE(cudaMemcpy(&last, static_cast<char*>(p) + kMiB - 1, 1, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(last == 0x5A);
  mr.deallocate_sync(p, kMiB);
  CHECK(mr.pool().stats().used_current == 0);
}

TEST_CASE("out of device memory: rmm::out_of_memory from RMM's containers, the pool unchanged", "[rmm][gpu]") {
  RmmResource mr{on_gpu(256 * kMiB)};
  Stream s;
  rmm::device_buffer keep(200 * kMiB, s.ref(), mr);
  const sova::PoolStats before = mr.pool().stats();
  CHECK_THROWS_AS(rmm::device_buffer(100 * kMiB, s.ref(), mr), rmm::out_of_memory);
  CHECK_THROWS_AS(rmm::device_uvector<int>(30 * kMiB, s.ref(), mr), rmm::out_of_memory);
  const sova::PoolStats after = mr.pool().stats();
  CHECK(after.used_current == before.used_current);
  CHECK(after.reserved_current == before.reserved_current);
  CHECK(after.live_blocks == 1);
  rmm::device_buffer fits(50 * kMiB, s.ref(), mr);
  CHECK(mr.pool().contains(fits.data()));
}

TEST_CASE("RMM's containers under stream capture: a graph of device_buffer and device_uvector launched many times",
          "[rmm][gpu][graphs]") {
  RmmResource mr{on_gpu()};
  Stream s;
  test_device().reset_mismatches();
  constexpr std::uint32_t kOutputTag = 0x0A7F1u;
  std::optional<rmm::device_buffer> output;  // made in the graph, read after it
  REQUIRE(cudaStreamBeginCapture(s.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
  {
    rmm::device_buffer scratch(4 * kMiB, s.ref(), mr);
    rmm::device_uvector<std::uint32_t> words(std::size_t{1} << 20, s.ref(), mr);
    test_device().fill(scratch.data(), 4 * kMiB, 0x5C4A7C4u, s.handle);
    test_device().fill(words.data(), words.size() * sizeof(std::uint32_t), 0x7E57u, s.handle);
    test_device().expect(scratch.data(), 4 * kMiB, 0x5C4A7C4u, s.handle);
    test_device().expect(words.data(), words.size() * sizeof(std::uint32_t), 0x7E57u, s.handle);
    output.emplace(2 * kMiB, s.ref(), mr);
    test_device().fill(output->data(), 2 * kMiB, kOutputTag, s.handle);
  }  // scratch and words freed under capture: memory the graph frees itself
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.handle, &graph) == cudaSuccess);  // the resource never invalidates it
  CHECK(mr.pool().stats().graph_held_bytes >= 2 * kMiB);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int i = 0; i < 100; ++i) REQUIRE(cudaGraphLaunch(exec, s.handle) == cudaSuccess);
  test_device().expect(output->data(), 2 * kMiB, kOutputTag, s.handle);
  REQUIRE(cudaStreamSynchronize(s.handle) == cudaSuccess);
  CHECK(test_device().mismatches() == 0);

  output.reset();  // the caller frees the graph's output, outside capture, on its stream
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.handle) == cudaSuccess);
  std::uint64_t held = 1;
  for (int i = 0; i < 10000 && held != 0; ++i) {  // the driver releases a graph on its own thread
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    held = mr.pool().graph_memory_stats().held_bytes;
  }
  CHECK(held == 0);
  CHECK(mr.pool().stats().used_current == 0);
  mr.pool().check_invariants();
}
