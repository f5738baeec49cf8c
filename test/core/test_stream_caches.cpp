// StreamCaches (lib/core/stream_caches.hpp) alone, on the simulation: the
// fast path's two halves — take_cached and cache_freed — on blocks made by
// hand, and the fences a free records by its rules (docs/design.md, "Driver
// calls per pair", gives the same rules as counts per pair of a whole pool).
#include "core/sim_pool_fixture.hpp"

#include "arena/arena.hpp"
#include "core/heap.hpp"
#include "core/stream_caches.hpp"
#include "core/stream_state_access.hpp"

#include <atomic>
#include <deque>
#include <limits>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

namespace {

constexpr std::size_t kG = std::size_t{2} << 20;  // the sim's granularity
constexpr std::size_t kVa = 64 * kG;

void complete_nothing(void*) noexcept {}

PoolOptions best_fit() {
  PoolOptions options;
  options.policy = Policy::best_fit;
  return options;
}

/// A StreamCaches with what it needs around it, and blocks made live by hand
/// (the heap never placed them: only the fast path touches them here).
struct Caches {
  SimDriver sim{small_sim()};
  Placement placement{best_fit(), kVa / 2};
  Heap heap{kVa, kG, placement, &complete_nothing, nullptr};
  Arena arena{sim, 0, kG, kVa, 0, 4 * kG};
  StreamCaches caches{sim, 0, /*check_streams=*/true, heap, arena};
  std::atomic<std::uint64_t> threshold{0};
  std::deque<Block> blocks;  // stable addresses; Block holds atomics
  std::size_t next_offset = 0;

  /// A live block of `size` bytes (backed whole) that `owner` allocated.
  Block* live(std::size_t size, StreamState* owner) {
    Block& b = blocks.emplace_back();
    b.offset = next_offset;
    b.size = size;
    b.backed = size;
    b.requested = size;
    b.allocated_on = owner;
    b.state.store(BlockState::live);
    next_offset += size;
    return &b;
  }

  bool free(Block* block, StreamState* state, cudaStream_t stream, bool may_fence = true) {
    return caches.cache_freed(block, block->offset, state, stream, may_fence, kG, threshold, [] {});
  }

  ~Caches() { (void)sim.device_synchronize(0); }
};

}  // namespace

TEST_CASE("stream caches: a block freed on a stream is its next allocation of that size, at once",
          "[core][stream_caches]") {
  Caches c;
  const cudaStream_t s = c.sim.create_stream();
  const cudaStream_t other = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  StreamState* other_state = c.caches.find(other);
  REQUIRE((state != nullptr && other_state != nullptr));
  Block* block = c.live(4096, state);
  c.sim.launch(s, [] {});  // work still running on the stream: reuse on it needs no wait
  REQUIRE(c.free(block, state, s));
  CHECK(block->state.load() == BlockState::cached);
  CHECK(c.caches.take_cached(other_state, 4096, 4096, 4096, other) == nullptr);  // another stream's cache
  CHECK(c.caches.take_cached(state, 8192, 8192, 8192, s) == nullptr);             // exact sizes only
  Block* again = c.caches.take_cached(state, 4096, 4096, 100, s);
  CHECK(again == block);
  CHECK(block->state.load() == BlockState::live);
  CHECK(block->requested == 100);
  CHECK(block->allocated_on == state);
  CHECK(c.caches.take_cached(state, 4096, 4096, 100, s) == nullptr);  // taken once
  c.sim.destroy_stream(other);
  c.sim.destroy_stream(s);
}

TEST_CASE("stream caches: a double free or a wrong offset is refused and caches nothing", "[core][stream_caches]") {
  Caches c;
  const cudaStream_t s = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  Block* block = c.live(4096, state);
  REQUIRE(c.free(block, state, s));
  CHECK_FALSE(c.free(block, state, s));  // cached already
  Block* other = c.live(4096, state);
  CHECK_FALSE(c.caches.cache_freed(other, other->offset + 512, state, s, true, kG, c.threshold, [] {}));
  CHECK(other->state.load() == BlockState::live);
  // The one free cached the block once: one take finds it, the next none.
  CHECK(c.caches.take_cached(state, 4096, 4096, 4096, s) == block);
  CHECK(c.caches.take_cached(state, 4096, 4096, 4096, s) == nullptr);
  c.sim.destroy_stream(s);
}

TEST_CASE("stream caches: above 4 MiB the fast path serves only the block freed last, backed for the request",
          "[core][stream_caches]") {
  Caches c;
  const cudaStream_t s = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  constexpr std::size_t big = 4 * kG;  // 8 MiB, above kLargestCachedBlock
  Block* first = c.live(big, state);
  Block* last = c.live(big, state);
  REQUIRE(c.free(first, state, s));
  REQUIRE(c.free(last, state, s));
  CHECK(c.caches.take_cached(state, big, big, big, s) == last);
  CHECK(c.caches.take_cached(state, big, big, big, s) == nullptr);  // `first` is left to the heap's fit
  CHECK(first->state.load() == BlockState::cached);
  // A cached block backed for less than a request needs is the slow path's.
  Block* partly = c.live(4096, state);
  partly->backed = 2048;
  REQUIRE(c.free(partly, state, s));
  CHECK(c.caches.take_cached(state, 4096, 4096, 4096, s) == nullptr);
  CHECK(c.caches.take_cached(state, 4096, 2048, 2048, s) == partly);
  c.sim.destroy_stream(s);
}

TEST_CASE("stream caches: a pool that gives memory back fences every free of a granule or more, no smaller one",
          "[core][stream_caches]") {
  Caches c;  // threshold 0
  const cudaStream_t s = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  for (int i = 0; i < 3; ++i) REQUIRE(c.free(c.live(kG - 512, state), state, s));
  CHECK(c.caches.events_recorded() == 0);
  for (int i = 0; i < 3; ++i) REQUIRE(c.free(c.live(kG, state), state, s));
  CHECK(c.caches.events_recorded() == 3);
  REQUIRE(c.free(c.live(kG, state), state, s, /*may_fence=*/false));  // the caller may not record on it
  CHECK(c.caches.events_recorded() == 3);
  c.sim.destroy_stream(s);
}

TEST_CASE("stream caches: a caching pool fences large frees by time, reading the clock on every 16th",
          "[core][stream_caches]") {
  Caches c;
  c.threshold = std::numeric_limits<std::uint64_t>::max();
  const cudaStream_t s = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  // The first large free reads the clock: no fence yet on this stream, so one is due.
  REQUIRE(c.free(c.live(kG, state), state, s));
  CHECK(c.caches.events_recorded() == 1);
  // The next 15 read no clock, so none records, however long they take.
  for (int i = 0; i < 15; ++i) REQUIRE(c.free(c.live(kG, state), state, s));
  CHECK(c.caches.events_recorded() == 1);
  // Small frees never fence in a caching pool.
  for (int i = 0; i < 40; ++i) REQUIRE(c.free(c.live(4096, state), state, s));
  CHECK(c.caches.events_recorded() == 1);
  c.sim.destroy_stream(s);
}

TEST_CASE("stream caches: a stream freeing another's blocks fences the first such free and every 16th",
          "[core][stream_caches]") {
  Caches c;
  c.threshold = std::numeric_limits<std::uint64_t>::max();  // no large-free rule in the way
  const cudaStream_t producer = c.sim.create_stream();
  const cudaStream_t consumer = c.sim.create_stream();
  StreamState* made = c.caches.find(producer);
  StreamState* freeing = c.caches.find(consumer);
  for (int i = 0; i < 32; ++i) REQUIRE(c.free(c.live(4096, made), freeing, consumer));
  CHECK(c.caches.events_recorded() == 2);  // the 1st and the 17th
  // Its own blocks' frees do not count towards those.
  for (int i = 0; i < 32; ++i) REQUIRE(c.free(c.live(4096, freeing), freeing, consumer));
  CHECK(c.caches.events_recorded() == 2);
  c.sim.destroy_stream(consumer);
  c.sim.destroy_stream(producer);
}

TEST_CASE("stream caches: a fence another stream asked for is recorded by the stream's next own call",
          "[core][stream_caches]") {
  Caches c;
  c.threshold = std::numeric_limits<std::uint64_t>::max();
  const cudaStream_t s = c.sim.create_stream();
  StreamState* state = c.caches.find(s);
  Block* block = c.live(4096, state);
  REQUIRE(c.free(block, state, s));
  CHECK(c.caches.events_recorded() == 0);
  StreamStateTestAccess::request_fence(*state);
  // The allocation's fast path records it first (its stream handle is valid)...
  CHECK(c.caches.take_cached(state, 4096, 4096, 4096, s) == block);
  CHECK(c.caches.events_recorded() == 1);
  // ...and the request is spent: the next call records none.
  REQUIRE(c.free(block, state, s));
  CHECK(c.caches.take_cached(state, 4096, 4096, 4096, s) == block);
  CHECK(c.caches.events_recorded() == 1);
  c.sim.destroy_stream(s);
}
