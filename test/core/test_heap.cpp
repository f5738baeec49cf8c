// Heap (lib/core/heap.hpp) alone: best fit, carving, coalescing, the region
// boundary, pending ranges kept out of other streams' fits, and what an
// address is to the heap. No driver: the heap places VA, the arena backs it.
#include "support/catch.hpp"

#include "core/heap.hpp"
#include "core/stream_state.hpp"  // states as the keys of pending ranges

#include <mutex>

using namespace sova;
using namespace sova::detail;

namespace {
constexpr std::size_t kG = std::size_t{2} << 20;
constexpr std::size_t kVa = 64 * kG;

PoolOptions with_policy(Policy policy) {
  PoolOptions options;
  options.policy = policy;
  return options;
}

int g_complete_all_calls = 0;
void count_complete_all(void*) noexcept { ++g_complete_all_calls; }

/// Takes `size` bytes for `user` by best fit; nullptr when nothing fits.
Block* take(Heap& heap, StreamState* user, std::size_t size) {
  const Fit fit = heap.best_fit(user, size);
  return fit.block != nullptr ? heap.carve(fit, size) : nullptr;
}
}  // namespace

TEST_CASE("heap: best fit carves blocks and freeing them coalesces", "[core][heap]") {
  const Placement placement(with_policy(Policy::best_fit), kVa / 2);
  Heap heap(kVa, kG, placement, &count_complete_all, nullptr);
  std::lock_guard<HeapMutex> lock(heap.mutex());
  StreamState stream;
  REQUIRE(heap.free_blocks().size() == 1);
  Block* a = take(heap, &stream, 4096);
  Block* b = take(heap, &stream, 8192);
  Block* c = take(heap, &stream, 4096);
  REQUIRE((a != nullptr && b != nullptr && c != nullptr));
  CHECK(a->offset == 0);
  CHECK(b->offset == 4096);
  CHECK(c->offset == 4096 + 8192);
  CHECK(heap.find(b->offset) == b);
  CHECK(heap.find(b->offset + 512) == nullptr);  // not a block start
  CHECK(heap.free_blocks().size() == 1);         // the tail
  // A free between two live blocks stays apart; the best fit then takes it.
  heap.insert_free(b);
  CHECK(heap.free_blocks().size() == 2);
  Block* again = take(heap, &stream, 8192);
  CHECK(again == b);
  CHECK(again->offset == 4096);
  // Freeing all three coalesces the whole range back into one block.
  heap.insert_free(a);
  heap.insert_free(c);
  heap.insert_free(again);
  CHECK(heap.free_blocks().size() == 1);
  CHECK((*heap.free_blocks().begin())->size == kVa);
  CHECK(heap.find(0) != nullptr);
}

TEST_CASE("heap: the default policy's region boundary is never merged across", "[core][heap]") {
  const Placement placement(with_policy(Policy::default_policy), kVa / 2);
  Heap heap(kVa, kG, placement, &count_complete_all, nullptr);
  std::lock_guard<HeapMutex> lock(heap.mutex());
  CHECK(heap.free_blocks().size() == 2);
  StreamState stream;
  Block* small = take(heap, &stream, 512);
  Block* large = take(heap, &stream, 8 * kG);
  REQUIRE((small != nullptr && large != nullptr));
  CHECK(small->offset >= kVa / 2);  // small blocks in the upper half
  CHECK(large->offset < kVa / 2);
  heap.insert_free(small);
  heap.insert_free(large);
  CHECK(heap.free_blocks().size() == 2);
}

TEST_CASE("heap: another stream's pending frees stay out of a fit until complete", "[core][heap]") {
  const Placement placement(with_policy(Policy::best_fit), kVa / 2);
  Heap heap(kVa, kG, placement, &count_complete_all, nullptr);
  std::lock_guard<HeapMutex> lock(heap.mutex());
  StreamState owner, other;
  Block* a = take(heap, &owner, kG);
  Block* guard = take(heap, &owner, 4096);  // keeps a's range apart from the tail
  REQUIRE((a != nullptr && guard != nullptr));
  // `a` freed on `owner` in epoch 3, not known complete (safe epoch 2).
  a->state.store(BlockState::cached);
  a->epoch = 3;
  a->bin_next = nullptr;  // a list of one
  heap.take_from_cache(&owner, /*owner_safe_epoch=*/2, a);
  REQUIRE(heap.has_pending(&owner));
  CHECK_FALSE(heap.has_pending(&other));
  CHECK(heap.latest_pending(&owner, 0, kG) == 3);
  CHECK(heap.pending_elsewhere(&other, 0, kG));
  CHECK_FALSE(heap.pending_elsewhere(&owner, 0, kG));
  // The owner may take its own frees back; another stream is placed after them.
  const Fit own = heap.best_fit(&owner, kG);
  CHECK(own.at == 0);
  const Fit elsewhere = heap.best_fit(&other, kG);
  REQUIRE(elsewhere.block != nullptr);
  CHECK(elsewhere.at >= kG + 4096);
  // Once epoch 3 is complete, the range is anyone's.
  heap.drop_complete_pending(&owner, 3);
  CHECK_FALSE(heap.any_pending());
  CHECK(heap.best_fit(&other, kG).at == 0);
  CHECK(g_complete_all_calls == 0);
}

TEST_CASE("heap: what an address is to the heap", "[core][heap]") {
  const Placement placement(with_policy(Policy::best_fit), kVa / 2);
  Heap heap(kVa, kG, placement, &count_complete_all, nullptr);
  StreamState stream;
  Block* a = nullptr;
  {
    std::lock_guard<HeapMutex> lock(heap.mutex());
    a = take(heap, &stream, 4096);
    a->requested = 4000;
  }
  PointerStatus status = heap.status_of(0);
  CHECK(status.kind == PointerStatus::Kind::live);
  status = heap.status_of(1024);
  CHECK(status.kind == PointerStatus::Kind::inside_live);
  CHECK(status.block_start == 0);
  CHECK(status.block_bytes == 4000);
  CHECK(heap.status_of(8192).kind == PointerStatus::Kind::inside_free);
  a->state.store(BlockState::cached);
  CHECK(heap.status_of(0).kind == PointerStatus::Kind::freed);
}
