// Conformance: physical remapping (PoolOptions::remap). Free physical chunks
// scattered between live blocks are moved under the VA of a larger request
// instead of new physical memory being created; live blocks keep their
// contents; with a size limit, remapping is what lets the request fit.
#include "conformance/pool_fixture.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <limits>

using namespace sova;
using namespace sova::test;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Eight 2 MiB blocks, one chunk each, tagged; the even ones freed and made
// safe (stream synchronized), so the pool holds 8 MiB of free physical memory
// in four pieces no 8 MiB request fits in.
struct Scattered {
  std::array<void*, 8> blocks{};
  Scattered(TestDevice& device, Pool& pool, cudaStream_t s) {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = pool.allocate(2 * kMiB, s);
      device.fill(blocks[i], 2 * kMiB, 0xB10C0000u + static_cast<std::uint32_t>(i), s);
    }
    for (std::size_t i = 0; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
    device.synchronize(s);
    pool.stream_synchronized(s);
  }
  // The odd (live) blocks still hold their tags.
  void expect_live_intact(TestDevice& device, cudaStream_t s) const {
    for (std::size_t i = 1; i < blocks.size(); i += 2) {
      device.expect(blocks[i], 2 * kMiB, 0xB10C0000u + static_cast<std::uint32_t>(i), s);
    }
  }
  // An 8 MiB block from the pool, written and read back on the device while
  // the live blocks are checked too: nothing moved under them.
  void* allocate_and_check_8mib(TestDevice& device, Pool& pool, cudaStream_t s, std::uint32_t tag) const {
    void* big = pool.allocate(8 * kMiB, s);
    device.fill(big, 8 * kMiB, tag, s);
    device.expect(big, 8 * kMiB, tag, s);
    expect_live_intact(device, s);
    device.synchronize(s);
    CHECK(device.mismatches() == 0);
    return big;
  }
  void free_live(Pool& pool, cudaStream_t s) const {
    for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
  }
};

PoolOptions remap_options(TestDevice& device, bool remap) {
  PoolOptions options = options_on(device);
  options.remap = remap;
  options.release_threshold = std::numeric_limits<std::uint64_t>::max();  // no idle release meanwhile
  return options;
}

// N blocks of 32 MiB, each its own chunk (the unit remapping moves), block i
// filled with `tag + i` when `tag` is not 0: what the tests of moving whole
// chunks start from.
constexpr std::size_t kChunkBlock = 32 * kMiB;
template <std::size_t N>
std::array<void*, N> allocate_chunk_blocks(TestDevice& device, Pool& pool, cudaStream_t s, std::uint32_t tag) {
  std::array<void*, N> blocks{};
  for (std::size_t i = 0; i < N; ++i) {
    blocks[i] = pool.allocate(kChunkBlock, s);
    if (tag != 0) device.fill(blocks[i], kChunkBlock, tag + static_cast<std::uint32_t>(i), s);
  }
  return blocks;
}

// Frees the even blocks and waits for the stream: their chunks are free and safe to move.
template <std::size_t N>
void free_even_blocks_complete(TestDevice& device, Pool& pool, cudaStream_t s, const std::array<void*, N>& blocks) {
  for (std::size_t i = 0; i < N; i += 2) pool.deallocate(blocks[i], s);
  device.synchronize(s);
  pool.stream_synchronized(s);
}

template <std::size_t N>
void free_odd_blocks(Pool& pool, cudaStream_t s, const std::array<void*, N>& blocks) {
  for (std::size_t i = 1; i < N; i += 2) pool.deallocate(blocks[i], s);
}

}  // namespace

TEST_CASE("free chunks in pieces are remapped under a larger request", "[conformance][remap]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  for (const bool remap : {true, false}) {
    INFO("remap " << remap);
    Pool pool(remap_options(device, remap));
    ScopedStream s(device);
    const Scattered scattered(device, pool, s);
    REQUIRE(attribute(pool, cudaMemPoolAttrReservedMemCurrent) == 16 * kMiB);

    void* big = scattered.allocate_and_check_8mib(device, pool, s, 0xB16B16u);

    const PoolStats stats = pool.stats();
    if (remap) {
      CHECK(stats.chunks_remapped == 4);
      CHECK(stats.bytes_remapped == 8 * kMiB);
      CHECK(stats.reserved_current == 16 * kMiB);  // nothing created
      CHECK(stats.reserved_high == 16 * kMiB);
      CHECK(stats.free_backed_bytes == 0);
    } else {
      CHECK(stats.chunks_remapped == 0);
      CHECK(stats.reserved_current == 24 * kMiB);
      CHECK(stats.free_backed_bytes == 8 * kMiB);
    }
    pool.check_invariants();
    pool.deallocate(big, s);
    scattered.free_live(pool, s);
    device.synchronize(s);
  }
}

TEST_CASE("under a size limit, remapping makes a request fit; beyond it, out of memory changes nothing",
          "[conformance][remap]") {
  TestDevice& device = test_device();
  device.reset_mismatches();
  PoolOptions options = remap_options(device, true);
  options.max_size = 16 * kMiB;
  Pool pool(options);
  ScopedStream s(device);
  const Scattered scattered(device, pool, s);

  // 10 MiB: four chunks move, the fifth granule cannot be created.
  void* p = nullptr;
  CHECK(pool.try_allocate(&p, 10 * kMiB, s) == cudaErrorMemoryAllocation);
  CHECK(p == nullptr);
  PoolStats stats = pool.stats();
  CHECK(stats.reserved_current == 16 * kMiB);
  CHECK(stats.used_current == 8 * kMiB);
  CHECK(stats.free_backed_bytes == 8 * kMiB);  // moved or not, still the pool's, still free
  pool.check_invariants();

  // 8 MiB fits in what is free: no growth, whatever moved before.
  void* big = scattered.allocate_and_check_8mib(device, pool, s, 0xF17F17u);
  stats = pool.stats();
  CHECK(stats.reserved_current == 16 * kMiB);
  CHECK(stats.chunks_mapped == 8);  // never more physical memory than the first eight chunks
  pool.check_invariants();
  pool.deallocate(big, s);
  scattered.free_live(pool, s);
  device.synchronize(s);
}

TEST_CASE("the allocating stream's own recent frees are remapped at once, their old places kept for their reads",
          "[conformance][remap]") {
  // Frees made a moment ago on a busy stream: no fence the pool recorded
  // covers them. Beyond the growth budget the pool moves their chunks under
  // the stream's new block without waiting for the stream (no
  // PoolStats::remap_waits; before pinned ghosts it synchronized the stream
  // once), rather than create 8 MiB more. The freed blocks are still read by
  // the stream after its busy spell: their old places stay mapped (pinned
  // ghosts, docs/design.md); unmapping them before those reads ran would
  // fault on the GPU and count mismatches on the simulation.
  TestDevice& device = test_device();
  for (const bool remap : {true, false}) {
    INFO("remap " << remap);
    device.reset_mismatches();
    Pool pool(remap_options(device, remap));
    ScopedStream s(device);
    std::array<void*, 8> blocks{};
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      blocks[i] = pool.allocate(2 * kMiB, s);
      device.fill(blocks[i], 2 * kMiB, 0x5E770000u + static_cast<std::uint32_t>(i), s);
    }
    device.busy(s, std::chrono::milliseconds(20));
    for (std::size_t i = 0; i < blocks.size(); i += 2) {
      device.expect(blocks[i], 2 * kMiB, 0x5E770000u + static_cast<std::uint32_t>(i), s);
      pool.deallocate(blocks[i], s);
    }

    void* big = pool.allocate(8 * kMiB, s);
    const PoolStats stats = pool.stats();
    // Once (ASan build, a loaded host) the pool grew here instead; what it saw:
    INFO("active streams " << stats.active_streams << ", served by heap " << stats.slow_from_heap
                           << " / heap after kept " << stats.slow_from_heap_all << " / other streams "
                           << stats.slow_from_other_streams << " / wait " << stats.slow_with_wait << " / grown "
                           << stats.slow_grown << ", chunks mapped " << stats.chunks_mapped << ", cached "
                           << stats.cached_bytes << ", used high " << stats.used_high);
    CHECK(stats.remap_waits == 0);
    if (remap) {
      CHECK(stats.chunks_remapped == 4);
      CHECK(stats.reserved_current == 16 * kMiB);
    } else {
      CHECK(stats.reserved_current == 24 * kMiB);
    }
    device.fill(big, 8 * kMiB, 0xB16B16u, s);
    device.expect(big, 8 * kMiB, 0xB16B16u, s);
    for (std::size_t i = 1; i < blocks.size(); i += 2) {
      device.expect(blocks[i], 2 * kMiB, 0x5E770000u + static_cast<std::uint32_t>(i), s);
    }
    device.synchronize(s);
    CHECK(device.mismatches() == 0);
    pool.check_invariants();
    pool.deallocate(big, s);
    for (std::size_t i = 1; i < blocks.size(); i += 2) pool.deallocate(blocks[i], s);
    device.synchronize(s);
  }
}

TEST_CASE("thorough remapping moves 8 MiB pieces of freed blocks into a gap no whole block fits",
          "[conformance][remap]") {
  // Two freed 32 MiB blocks, each between live ones, and a 40 MiB request:
  // neither hole takes it. A thorough pool made each 32 MiB block of four
  // 8 MiB chunks (RemapEffort::thorough), so five of them move under the
  // request and nothing is created; a balanced pool made one 32 MiB chunk
  // each, which cannot fill the 8 MiB left after one moves (it releases the
  // other and creates 8 MiB: docs/design.md, "Growth").
  TestDevice& device = test_device();
  device.reset_mismatches();
  PoolOptions options = remap_options(device, true);
  options.remap_effort = RemapEffort::thorough;
  Pool pool(options);
  ScopedStream s(device);
  std::array<void*, 4> blocks{};
  const std::array<std::size_t, 4> sizes{32 * kMiB, 2 * kMiB, 32 * kMiB, 2 * kMiB};
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i] = pool.allocate(sizes[i], s);
    device.fill(blocks[i], sizes[i], 0x7A6E0000u + static_cast<std::uint32_t>(i), s);
  }
  CHECK(pool.stats().chunks_mapped == 10);  // 4 + 1 + 4 + 1: 8 MiB for blocks under 256 MiB
  pool.deallocate(blocks[0], s);
  pool.deallocate(blocks[2], s);
  device.synchronize(s);
  pool.stream_synchronized(s);

  void* big = pool.allocate(40 * kMiB, s);
  const PoolStats stats = pool.stats();
  CHECK(stats.chunks_remapped == 5);
  CHECK(stats.chunks_mapped == 10);  // nothing created
  CHECK(stats.reserved_current == 68 * kMiB);
  device.fill(big, 40 * kMiB, 0xB16B16u, s);
  device.expect(big, 40 * kMiB, 0xB16B16u, s);
  for (std::size_t i : {std::size_t{1}, std::size_t{3}}) {
    device.expect(blocks[i], sizes[i], 0x7A6E0000u + static_cast<std::uint32_t>(i), s);
  }
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  pool.deallocate(big, s);
  pool.deallocate(blocks[1], s);
  pool.deallocate(blocks[3], s);
  device.synchronize(s);
}

TEST_CASE("a chunk that moves back to where it was moves without a new mapping, its data intact",
          "[conformance][remap][ghost]") {
  // Eight 32 MiB blocks (a chunk each); the even ones freed. A 128 MiB
  // request beyond the growth budget takes their four chunks (moves that
  // map). Freed in turn, the chunks are wanted back where they came from by
  // four 32 MiB requests, which best fit places in the four holes: each
  // chunk is still mapped there (a ghost, docs/design.md), so the moves
  // back map nothing (PoolStats::remaps_to_ghosts). Data written through
  // every block reads back, on the GPU as on the simulation.
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(remap_options(device, true));
  ScopedStream s(device);
  constexpr std::size_t kBlock = kChunkBlock;
  std::array<void*, 8> blocks = allocate_chunk_blocks<8>(device, pool, s, 0x6057'0000u);
  free_even_blocks_complete(device, pool, s, blocks);

  void* big = pool.allocate(4 * kBlock, s);
  PoolStats stats = pool.stats();
  REQUIRE(stats.chunks_remapped == 4);
  CHECK(stats.remaps_to_ghosts == 0);
  CHECK(stats.ghost_mappings == 4);
  CHECK(stats.chunks_mapped == 8);
  device.fill(big, 4 * kBlock, 0xB16B16u, s);
  device.expect(big, 4 * kBlock, 0xB16B16u, s);
  pool.deallocate(big, s);
  device.synchronize(s);
  pool.stream_synchronized(s);

  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    void* again = pool.allocate(kBlock, s);
    CHECK(again == blocks[i]);  // best fit: the lowest of the 32 MiB holes
    blocks[i] = again;
  }
  stats = pool.stats();
  CHECK(stats.chunks_remapped == 8);
  CHECK(stats.remaps_to_ghosts == 4);
  CHECK(stats.chunks_mapped == 8);  // nothing created
  CHECK(stats.reserved_current == 8 * kBlock);
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    device.fill(blocks[i], kBlock, 0x6A1E'0000u + static_cast<std::uint32_t>(i), s);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::uint32_t tag = (i % 2 == 0 ? 0x6A1E'0000u : 0x6057'0000u) + static_cast<std::uint32_t>(i);
    device.expect(blocks[i], kBlock, tag, s);
  }
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  for (void* p : blocks) pool.deallocate(p, s);
  device.synchronize(s);
  pool.trim_to(0);
  CHECK(pool.stats().reserved_current == 0);
  CHECK(pool.stats().ghost_mappings == 0);  // released with their chunks
}

TEST_CASE("remapping moves the highest free chunks, so the holes the best fit fills next stay backed",
          "[conformance][remap]") {
  // Twelve 32 MiB blocks (a chunk each); the even ones freed: six free
  // chunks. A 128 MiB request beyond the growth budget takes four of them.
  // Taken from the top (blocks 10, 8, 6, 4), the two lowest holes keep
  // their chunks, and the next 32 MiB request, which best fit places in the
  // lowest hole, needs no driver work. Taken from the bottom, as sova did
  // before, that hole was the one just unbacked: each block then pulled the
  // next chunk up, a chain of moves (docs/benchmarks.md, "Ghost mappings and
  // the order of donor chunks").
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(remap_options(device, true));
  ScopedStream s(device);
  constexpr std::size_t kBlock = kChunkBlock;
  const std::array<void*, 12> blocks = allocate_chunk_blocks<12>(device, pool, s, /*tag=*/0);
  free_even_blocks_complete(device, pool, s, blocks);

  void* big = pool.allocate(4 * kBlock, s);
  PoolStats stats = pool.stats();
  REQUIRE(stats.chunks_remapped == 4);
  REQUIRE(stats.reserved_current == 12 * kBlock);
  const std::uint64_t mapped_before = stats.chunks_mapped;

  void* next = pool.allocate(kBlock, s);
  CHECK(next == blocks[0]);  // best fit: the lowest 32 MiB hole
  stats = pool.stats();
  CHECK(stats.chunks_remapped == 4);            // backed already: nothing moved ...
  CHECK(stats.chunks_mapped == mapped_before);  // ... or created
  CHECK(stats.reserved_current == 12 * kBlock);
  device.fill(next, kBlock, 0x4E57u, s);
  device.fill(big, 4 * kBlock, 0xB16B16u, s);
  device.expect(next, kBlock, 0x4E57u, s);
  device.expect(big, 4 * kBlock, 0xB16B16u, s);
  device.synchronize(s);
  CHECK(device.mismatches() == 0);
  pool.check_invariants();
  pool.deallocate(next, s);
  pool.deallocate(big, s);
  free_odd_blocks(pool, s, blocks);
  device.synchronize(s);
}

TEST_CASE("a chunk under the stream's own recent frees moves at once, its old place mapped until their work is done",
          "[conformance][remap][ghost]") {
  // Twelve 32 MiB blocks; the even ones are read by work queued behind
  // 1.5 s of other work (long enough for a loaded, sanitized run), then
  // freed: their frees are pending. A 128 MiB request on the same stream,
  // beyond the growth budget, takes four of their chunks without waiting
  // (the block is the stream's own: its work runs after those reads), and
  // each chunk's old place stays mapped, pinned, while the reads may run.
  // Three 32 MiB requests then fill the holes; the third lands on a pinned old place, and backing it
  // must wait for the reads before unmapping what they read (on the GPU an
  // illegal address otherwise, on the simulation a fault).
  TestDevice& device = test_device();
  device.reset_mismatches();
  Pool pool(remap_options(device, true));
  ScopedStream s(device);
  constexpr std::size_t kBlock = kChunkBlock;
  const std::array<void*, 12> blocks = allocate_chunk_blocks<12>(device, pool, s, 0x0BE5'0000u);
  device.synchronize(s);
  pool.stream_synchronized(s);
  device.busy(s, std::chrono::milliseconds(1500));
  for (std::size_t i = 0; i < blocks.size(); i += 2) {
    device.expect(blocks[i], kBlock, 0x0BE5'0000u + static_cast<std::uint32_t>(i), s);
    pool.deallocate(blocks[i], s);
  }

  void* big = pool.allocate(4 * kBlock, s);
  PoolStats stats = pool.stats();
  CHECK(stats.chunks_remapped == 4);
  CHECK(stats.remap_waits == 0);  // moved at once: no wait for the stream
  CHECK(stats.reserved_current == 12 * kBlock);

  std::array<void*, 3> holes{};
  for (void*& hole : holes) hole = pool.allocate(kBlock, s);
  CHECK(holes[0] == blocks[0]);
  CHECK(holes[1] == blocks[2]);
  CHECK(holes[2] == blocks[4]);  // a chunk's old place: the reads of it came first
  stats = pool.stats();
  CHECK(stats.remap_waits == 1);

  device.fill(big, 4 * kBlock, 0xB16B16u, s);
  for (std::size_t i = 0; i < holes.size(); ++i) {
    device.fill(holes[i], kBlock, 0x4013'0000u + static_cast<std::uint32_t>(i), s);
  }
  device.expect(big, 4 * kBlock, 0xB16B16u, s);
  for (std::size_t i = 0; i < holes.size(); ++i) {
    device.expect(holes[i], kBlock, 0x4013'0000u + static_cast<std::uint32_t>(i), s);
  }
  for (std::size_t i = 1; i < blocks.size(); i += 2) {
    device.expect(blocks[i], kBlock, 0x0BE5'0000u + static_cast<std::uint32_t>(i), s);
  }
  device.synchronize(s);
  CHECK(device.mismatches() == 0);  // the first reads too: the old places were still mapped
  pool.check_invariants();
  pool.deallocate(big, s);
  for (void* p : holes) pool.deallocate(p, s);
  free_odd_blocks(pool, s, blocks);
  device.synchronize(s);
  pool.trim_to(0);
  CHECK(pool.stats().reserved_current == 0);
  CHECK(pool.stats().ghost_mappings == 0);
}
