// sova::RmmResource on the host simulation (sova_rmm_tests, suite 'sim';
// built with -Drmm_root): the resource's contracts as RMM and CCCL see them —
// the concept, copies over one pool, alignments, errors, the synchronous
// pair, RMM's per-device map and adaptors. RMM's containers need a GPU:
// test_rmm_gpu.cpp (suite 'gpu').
#include "support/catch.hpp"

#include <sova/rmm.hpp>
#include <sova/sim.hpp>

#include <rmm/cuda_device.hpp>
#include <rmm/mr/per_device_resource.hpp>
#include <rmm/mr/statistics_resource_adaptor.hpp>
#include <rmm/resource_ref.hpp>

#include <cuda/memory_resource>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using sova::Pool;
using sova::PoolOptions;
using sova::RmmResource;
using sova::SimDriver;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

PoolOptions on(SimDriver& sim, std::size_t max_size = 0) {
  PoolOptions options;
  options.driver = &sim;
  options.max_size = max_size;
  return options;
}

bool aligned(const void* ptr, std::size_t alignment) { return reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0; }

// What a refused call must leave as it was.
struct Snapshot {
  std::uint64_t used, reserved, live, allocations;
  explicit Snapshot(const Pool& pool) {
    const sova::PoolStats s = pool.stats();
    used = s.used_current, reserved = s.reserved_current, live = s.live_blocks, allocations = s.allocations;
  }
  bool operator==(const Snapshot&) const = default;
};

// Runs `body` in a forked child with stderr captured; returns (signal that
// ended it or 0, what it wrote to stderr). The child must not need other
// threads of the parent (the sim's stream workers): bad frees are refused
// before any stream work.
std::pair<int, std::string> in_child(const std::function<void()>& body) {
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(20);                      // a hang is a failure, not a stuck test
    std::signal(SIGABRT, SIG_DFL);  // not Catch2's handler, which would report it as the parent's failure
    dup2(pipe_fds[1], 2);
    close(pipe_fds[0]);
    body();
    _exit(0);
  }
  close(pipe_fds[1]);
  std::string text;
  char buffer[512];
  for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return {WIFSIGNALED(status) ? WTERMSIG(status) : 0, text};
}

}  // namespace

TEST_CASE("RmmResource is a device-accessible cuda::mr resource that RMM's refs take", "[rmm]") {
  static_assert(cuda::mr::resource_with<RmmResource, cuda::mr::device_accessible>);
  static_assert(cuda::mr::synchronous_resource_with<RmmResource, cuda::mr::device_accessible>);
  static_assert(!cuda::mr::resource_with<RmmResource, cuda::mr::host_accessible>);
  static_assert(std::is_copy_constructible_v<RmmResource> && std::is_copy_assignable_v<RmmResource>);

  SimDriver sim;
  RmmResource mr{on(sim)};
  const cudaStream_t s = sim.create_stream();

  rmm::device_async_resource_ref ref{mr};
  void* p = ref.allocate(cuda::stream_ref{s}, 1000, rmm::CUDA_ALLOCATION_ALIGNMENT);
  CHECK(mr.pool().contains(p));
  CHECK(mr.pool().block_size(p) == 1000);
  CHECK(mr.pool().stats().used_current == 1000);
  ref.deallocate(cuda::stream_ref{s}, p, 1000, rmm::CUDA_ALLOCATION_ALIGNMENT);
  CHECK(mr.pool().stats().used_current == 0);

  // Owning type erasure, as RMM's per-device map and adaptors hold resources.
  cuda::mr::any_resource<cuda::mr::device_accessible> any{mr};
  void* q = any.allocate(cuda::stream_ref{s}, 1000, 256);
  CHECK(q == p);  // the block the ref freed on s, reused at once (stream order)
  CHECK(mr.pool().stats().fast_path_hits == 1);
  any.deallocate(cuda::stream_ref{s}, q, 1000, 256);
  // The synchronous form, with the alignment CCCL defaulted to (alignof(max_align_t)).
  void* r = any.allocate_sync(100, alignof(std::max_align_t));
  CHECK(mr.pool().block_size(r) == 100);
  any.deallocate_sync(r, 100, alignof(std::max_align_t));
  CHECK(mr.pool().stats().used_current == 0);
  mr.pool().check_invariants();
}

TEST_CASE("RmmResource copies share one pool; equality means the same pool", "[rmm]") {
  SimDriver sim;
  RmmResource a{on(sim)};
  RmmResource b = a;
  CHECK(a == b);
  CHECK_FALSE(a != b);
  CHECK(&a.pool() == &b.pool());
  CHECK(a.shared_pool().use_count() == 1);  // one keeper, shared by the copies

  // Memory from one copy goes back through the other.
  void* p = a.allocate(cuda::stream_ref{cudaStream_t{}}, 512 * 1024);
  b.deallocate(cuda::stream_ref{cudaStream_t{}}, p, 512 * 1024);
  CHECK(a.pool().stats().live_blocks == 0);

  // Two resources made from the same pool are equal too; another pool is not.
  auto shared = std::make_shared<Pool>(on(sim));
  RmmResource c{shared}, d{shared};
  CHECK(c == d);
  CHECK(c != a);
  CHECK(rmm::device_async_resource_ref{c} == rmm::device_async_resource_ref{d});
  CHECK(rmm::device_async_resource_ref{c} != rmm::device_async_resource_ref{a});

  CHECK_THROWS_AS(RmmResource{std::shared_ptr<Pool>{}}, std::invalid_argument);

  // The pool lives as long as any copy does.
  std::weak_ptr<Pool> watch;
  {
    RmmResource only{on(sim)};
    watch = only.shared_pool();
    RmmResource kept = only;
    { RmmResource gone = std::move(only); }
    CHECK_FALSE(watch.expired());
    void* x = kept.allocate(cuda::stream_ref{cudaStream_t{}}, 256);
    kept.deallocate(cuda::stream_ref{cudaStream_t{}}, x, 256);
  }
  CHECK(watch.expired());
}

TEST_CASE("alignments up to 512 are sova's own; larger powers of two are honoured and freed", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  const cudaStream_t s = sim.create_stream();
  const cuda::stream_ref stream{s};

  for (std::size_t alignment = 1; alignment <= RmmResource::kPoolAlignment; alignment *= 2) {
    INFO("alignment " << alignment);
    void* p = mr.allocate(stream, 1000, alignment);
    CHECK(aligned(p, RmmResource::kPoolAlignment));
    CHECK(mr.pool().stats().used_current == 1000);  // no padding
    mr.deallocate(stream, p, 1000, alignment);
  }

  // Larger: each block padded by alignment - 512, the pointer the first
  // aligned address in it; several live at once among plain blocks, freed in
  // a random order, from two streams.
  const std::size_t alignments[] = {1024, 4096, 65536, 2 * kMiB, 8 * kMiB};
  struct Live {
    void* ptr;
    std::size_t bytes, alignment;
  };
  std::vector<Live> live;
  std::mt19937 random(7);
  for (int round = 0; round < 4; ++round) {
    for (std::size_t alignment : alignments) {
      const std::size_t bytes = 1 + random() % (3 * kMiB);
      void* p = mr.allocate(stream, bytes, alignment);
      INFO("alignment " << alignment << ", " << bytes << " bytes at " << p);
      CHECK(aligned(p, alignment));
      CHECK(mr.pool().contains(p));
      CHECK(mr.pool().contains(static_cast<char*>(p) + bytes - 1));
      live.push_back({p, bytes, alignment});
      void* plain = mr.allocate(stream, bytes);
      live.push_back({plain, bytes, 256});
    }
  }
  std::uint64_t requested = 0;
  for (const Live& l : live) requested += l.bytes + (l.alignment > 512 ? l.alignment - 512 : 0);
  CHECK(mr.pool().stats().used_current == requested);
  CHECK(mr.pool().stats().live_blocks == live.size());
  // No two blocks overlap.
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
  for (const Live& l : live)
    spans.emplace_back(reinterpret_cast<std::uintptr_t>(l.ptr), reinterpret_cast<std::uintptr_t>(l.ptr) + l.bytes);
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) CHECK(spans[i - 1].second <= spans[i].first);

  std::shuffle(live.begin(), live.end(), random);
  const cudaStream_t other = sim.create_stream();
  for (std::size_t i = 0; i < live.size(); ++i) {
    mr.deallocate(cuda::stream_ref{i % 2 ? other : s}, live[i].ptr, live[i].bytes, live[i].alignment);
  }
  CHECK(mr.pool().stats().used_current == 0);
  CHECK(mr.pool().stats().live_blocks == 0);
  mr.pool().check_invariants();
}

TEST_CASE("an alignment that is not a power of two is refused with rmm::bad_alloc, changing nothing", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  void* keep = mr.allocate(cuda::stream_ref{cudaStream_t{}}, 4096);
  const Snapshot before(mr.pool());
  for (std::size_t alignment :
       {std::size_t{0}, std::size_t{3}, std::size_t{768}, std::size_t{1000}, std::size_t{6144}}) {
    INFO("alignment " << alignment);
    bool refused = false;
    try {
      (void)mr.allocate(cuda::stream_ref{cudaStream_t{}}, 4096, alignment);
    } catch (const rmm::out_of_memory&) {
      FAIL("not an out-of-memory condition");
    } catch (const rmm::bad_alloc& e) {
      refused = std::string(e.what()).find("not a power of two") != std::string::npos;
    }
    CHECK(refused);
    CHECK_THROWS_AS(mr.allocate_sync(4096, alignment), rmm::bad_alloc);
  }
  CHECK(Snapshot(mr.pool()) == before);
  mr.deallocate(cuda::stream_ref{cudaStream_t{}}, keep, 4096);
}

TEST_CASE("running out of memory throws rmm::out_of_memory with sova's message, changing nothing", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim, 64 * kMiB)};
  const cudaStream_t s = sim.create_stream();
  void* keep = mr.allocate(cuda::stream_ref{s}, 40 * kMiB);
  const Snapshot before(mr.pool());

  std::string message;
  try {
    (void)mr.allocate(cuda::stream_ref{s}, 40 * kMiB);
  } catch (const rmm::out_of_memory& e) {
    message = e.what();
  }
  CHECK(message.find("sova: allocating 41943040 bytes") != std::string::npos);
  CHECK(Snapshot(mr.pool()) == before);

  // Over-aligned: the padding counts, and a size that cannot be padded is refused.
  CHECK_THROWS_AS(mr.allocate(cuda::stream_ref{s}, 24 * kMiB - 1024, 16 * kMiB), rmm::out_of_memory);
  CHECK_THROWS_AS(mr.allocate(cuda::stream_ref{s}, SIZE_MAX - 100, 4096), rmm::out_of_memory);
  CHECK_THROWS_AS(mr.allocate_sync(40 * kMiB), rmm::out_of_memory);
  CHECK(Snapshot(mr.pool()) == before);

  // What fits still works.
  void* more = mr.allocate(cuda::stream_ref{s}, 20 * kMiB);
  CHECK(more != nullptr);
  mr.deallocate(cuda::stream_ref{s}, more, 20 * kMiB);
  mr.deallocate(cuda::stream_ref{s}, keep, 40 * kMiB);
  mr.pool().check_invariants();
}

TEST_CASE("zero bytes give nullptr and freeing nullptr does nothing", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  CHECK(mr.allocate(cuda::stream_ref{cudaStream_t{}}, 0) == nullptr);
  CHECK(mr.allocate(cuda::stream_ref{cudaStream_t{}}, 0, 4096) == nullptr);
  CHECK(mr.allocate_sync(0) == nullptr);
  mr.deallocate(cuda::stream_ref{cudaStream_t{}}, nullptr, 0);
  mr.deallocate(cuda::stream_ref{cudaStream_t{}}, nullptr, 0, 4096);
  mr.deallocate_sync(nullptr, 0);
  CHECK(mr.pool().stats().allocations == 0);
  CHECK(mr.pool().stats().deallocations == 0);
}

TEST_CASE("allocate_sync returns once the default stream's earlier work is done", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  // Work on the legacy stream that is still running when allocate_sync is called.
  std::atomic<bool> done{false};
  sim.delay(cudaStream_t{}, std::chrono::milliseconds(100));
  sim.launch(cudaStream_t{}, [&done] { done = true; });
  void* p = mr.allocate_sync(1 << 20);
  CHECK(done.load());
  CHECK(mr.pool().block_size(p) == (1 << 20));
  mr.deallocate_sync(p, 1 << 20);
  CHECK(mr.pool().stats().used_current == 0);
}

TEST_CASE("RmmResource copies on several streams and threads, through any_resource", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> misplaced{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cuda::mr::any_resource<cuda::mr::device_accessible> any{mr};  // a copy per thread
      const cudaStream_t s = sim.create_stream();
      std::mt19937 random(t);
      std::vector<std::pair<void*, std::size_t>> held;
      for (int i = 0; i < 2000; ++i) {
        if (held.size() < 16 && (held.empty() || random() % 2)) {
          const std::size_t bytes = 1 + random() % (1 << 20);
          const std::size_t alignment = std::size_t{1} << (random() % 14);  // 1 .. 8 KiB
          void* p = any.allocate(cuda::stream_ref{s}, bytes, alignment);
          if (!aligned(p, alignment) || !mr.pool().contains(p)) ++misplaced;
          held.emplace_back(p, bytes | (alignment << 32));
        } else {
          const auto [p, packed] = held.back();
          held.pop_back();
          any.deallocate(cuda::stream_ref{s}, p, packed & 0xffffffff, packed >> 32);
        }
      }
      for (const auto& [p, packed] : held) any.deallocate(cuda::stream_ref{s}, p, packed & 0xffffffff, packed >> 32);
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(misplaced == 0);
  CHECK(mr.pool().stats().used_current == 0);
  CHECK(mr.pool().stats().live_blocks == 0);
  mr.pool().check_invariants();
}

TEST_CASE("RMM's per-device map keeps a copy, and the pool with it", "[rmm]") {
  SimDriver sim;
  std::weak_ptr<Pool> watch;
  const rmm::cuda_device_id device{0};
  cuda::mr::any_resource<cuda::mr::device_accessible> previous{rmm::mr::detail::initial_resource()};
  {
    RmmResource mr{on(sim)};
    watch = mr.shared_pool();
    previous = rmm::mr::set_per_device_resource(device, mr);
    CHECK(rmm::mr::get_per_device_resource_ref(device) == rmm::device_async_resource_ref{mr});
  }
  REQUIRE_FALSE(watch.expired());  // the map's copy holds it
  rmm::device_async_resource_ref current = rmm::mr::get_per_device_resource_ref(device);
  void* p = current.allocate(cuda::stream_ref{cudaStream_t{}}, 12345, 256);
  CHECK(watch.lock()->block_size(p) == 12345);
  current.deallocate(cuda::stream_ref{cudaStream_t{}}, p, 12345, 256);

  // Putting the previous resource back drops the last copy, and the pool.
  (void)rmm::mr::set_per_device_resource(device, std::move(previous));
  CHECK(watch.expired());
}

TEST_CASE("RMM's adaptors take an RmmResource as their upstream", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  rmm::mr::statistics_resource_adaptor stats{mr};
  void* p = stats.allocate(cuda::stream_ref{cudaStream_t{}}, 3000, 256);
  CHECK(stats.get_bytes_counter().value == 3000);
  CHECK(mr.pool().block_size(p) == 3000);
  stats.deallocate(cuda::stream_ref{cudaStream_t{}}, p, 3000, 256);
  CHECK(stats.get_bytes_counter().value == 0);
  CHECK(mr.pool().stats().used_current == 0);
}

TEST_CASE("a free sova refuses aborts with a message; the pool is unchanged", "[rmm]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  const cuda::stream_ref legacy{cudaStream_t{}};
  void* p = mr.allocate(legacy, 8192);
  void* over = mr.allocate(legacy, 8192, 64 * 1024);
  int host_word = 0;
  const Snapshot before(mr.pool());

  struct Case {
    const char* what;
    std::function<void()> body;
  };
  std::vector<Case> cases = {
      {"a foreign pointer", [&] { mr.deallocate(legacy, &host_word, sizeof host_word); }},
      {"an interior pointer", [&] { mr.deallocate(legacy, static_cast<char*>(p) + 512, 1024); }},
      {"a double free",
       [&] {
         mr.deallocate(legacy, p, 8192);
         mr.deallocate(legacy, p, 8192);
       }},
      {"a never-allocated address in the pool, over-aligned",
       [&] { mr.deallocate(legacy, static_cast<char*>(over) + 4 * kMiB, 8192, 64 * 1024); }},
  };
  // Freed with another alignment than at allocation: refused when the block
  // was padded (its aligned pointer is interior), which it is unless the
  // pool happened to place it at a 64 KiB boundary.
  if (mr.pool().block_size(over) == 0) {
    cases.push_back({"an over-aligned block freed with 256", [&] { mr.deallocate(legacy, over, 8192, 256); }});
  }
  REQUIRE(mr.pool().contains(static_cast<char*>(over) + 4 * kMiB));
  for (const Case& c : cases) {
    INFO(c.what);
    const auto [signal, text] = in_child(c.body);
    CHECK(signal == SIGABRT);
    CHECK(text.find("sova::RmmResource::deallocate") != std::string::npos);
    CHECK(text.find("not a live block of this pool") != std::string::npos);
  }
  CHECK(Snapshot(mr.pool()) == before);
  mr.deallocate(legacy, over, 8192, 64 * 1024);
  mr.deallocate(legacy, p, 8192);
  CHECK(mr.pool().stats().live_blocks == 0);
}

TEST_CASE("RmmResource allocates and frees under stream capture: graph memory, as sova's pools give it",
          "[rmm][graphs]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  rmm::device_async_resource_ref ref{mr};  // how RMM's containers hold it
  const cudaStream_t s = sim.create_stream();
  const cuda::stream_ref stream{s};
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  void* scratch = ref.allocate(stream, 4 * kMiB, 256);          // freed inside the graph
  void* aligned_out = ref.allocate(stream, 3 * kMiB, 64 * 1024);  // an output, over-aligned
  CHECK(aligned(aligned_out, 64 * 1024));
  sim.launch(s, [scratch, aligned_out] {
    std::memset(scratch, 0x11, 4 * kMiB);
    std::memset(aligned_out, 0x22, 3 * kMiB);
  });
  ref.deallocate(stream, scratch, 4 * kMiB, 256);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);  // the resource never invalidates it
  CHECK(mr.pool().stats().graph_held_bytes >= 7 * kMiB);

  cudaGraphExec_t exec = nullptr;
  REQUIRE(sim.graph_instantiate(&exec, graph) == cudaSuccess);
  for (int i = 0; i < 20; ++i) REQUIRE(sim.graph_launch(exec, s) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  const auto* out = static_cast<const unsigned char*>(aligned_out);
  CHECK(std::all_of(out, out + 3 * kMiB, [](unsigned char b) { return b == 0x22; }));

  // The graph's output is the caller's to free, outside capture, with its alignment.
  ref.deallocate(stream, aligned_out, 3 * kMiB, 64 * 1024);
  REQUIRE(sim.graph_exec_destroy(exec) == cudaSuccess);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  std::uint64_t held = 1;
  for (int i = 0; i < 1000 && held != 0; ++i) {  // the release callback runs on the driver's own thread
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    held = mr.pool().graph_memory_stats().held_bytes;
  }
  CHECK(held == 0);
  CHECK(mr.pool().stats().used_current == 0);
  sim.destroy_stream(s);
}

TEST_CASE("a block allocated before a capture and freed during it is freed once the capture is over",
          "[rmm][graphs]") {
  SimDriver sim;
  RmmResource mr{on(sim)};
  const cudaStream_t s = sim.create_stream();
  const cuda::stream_ref stream{s};
  void* eager = mr.allocate(stream, 2 * kMiB);
  void* eager_aligned = mr.allocate(stream, kMiB, 8192);
  REQUIRE(sim.begin_capture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  // A container going out of scope inside the capture: refused by the pool
  // under capture, kept by the resource (no abort), the capture still valid.
  mr.deallocate(stream, eager, 2 * kMiB);
  mr.deallocate(stream, eager_aligned, kMiB, 8192);
  void* in_graph = mr.allocate(stream, kMiB);  // a call during the capture frees nothing yet
  mr.deallocate(stream, in_graph, kMiB);
  CHECK(mr.pool().block_size(eager) == 2 * kMiB);
  cudaGraph_t graph = nullptr;
  REQUIRE(sim.end_capture(s, &graph) == cudaSuccess);
  auto eager_live = [&mr] {
    const sova::PoolStats stats = mr.pool().stats();
    return stats.live_blocks - stats.graph_held_blocks;  // the graph's own block is live until it goes
  };
  CHECK(eager_live() == 2);  // the two eager blocks, still live

  void* after = mr.allocate(stream, 4096);  // the first call outside the capture frees them
  CHECK(mr.pool().block_size(eager) == 0);
  CHECK(eager_live() == 1);
  mr.deallocate(stream, after, 4096);
  REQUIRE(sim.graph_destroy(graph) == cudaSuccess);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  CHECK(mr.pool().stats().used_current == 0);
  sim.destroy_stream(s);
}
