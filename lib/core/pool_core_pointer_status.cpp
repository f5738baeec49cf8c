// PoolCore::pointer_status: what an address is to this pool, for the error
// message of a refused free (Pool::deallocate, the C API's last error).
// Error paths only: it takes the heap lock and may walk every block.
#include "core/pointer_status.hpp"
#include "core/pool_core.hpp"

#include <cinttypes>
#include <cstdio>
#include <mutex>

namespace sova::detail {

PointerStatus PoolCore::pointer_status(const void* ptr) {
  PointerStatus status;
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(ptr);
  if (!arena_.contains(address)) return status;  // outside
  const std::size_t offset = address - arena_.base();
  // Blocks tile the range in address order and change shape only under the
  // heap lock (block.hpp): under it, the walk from the first block sees a
  // consistent tiling. The state of a live or cached block may still flip
  // (a free or an allocation on a stream's fast path): the answer is a
  // snapshot, good for a message, not for a decision.
  std::lock_guard lock(heap_mutex_);
  const Block* block = map_.find(0);
  while (block != nullptr && block->offset + block->size <= offset) block = block->next;
  if (block == nullptr) return status;  // cannot happen while the tiling holds; say "outside"
  const BlockState state = block->state.load(std::memory_order_acquire);
  const bool at_start = block->offset == offset;
  if (state == BlockState::live) {
    status.kind = at_start ? PointerStatus::Kind::live : PointerStatus::Kind::inside_live;
    status.block_start = arena_.base() + block->offset;
    status.block_bytes = block->requested;
  } else if (state == BlockState::cached && at_start) {
    status.kind = PointerStatus::Kind::freed;  // only a live block becomes cached: it was freed
  } else {
    // Free in the heap: a freed block merged with its neighbours, or memory
    // never handed out; nothing tells which.
    status.kind = PointerStatus::Kind::inside_free;
  }
  return status;
}

std::string describe_pointer_status(const PointerStatus& status) {
  switch (status.kind) {
    case PointerStatus::Kind::outside:
      return "not allocated by this pool";
    case PointerStatus::Kind::live:
      return "a live block of this pool";
    case PointerStatus::Kind::inside_live: {
      char text[128];
      std::snprintf(text, sizeof text, "inside a block allocated at %#" PRIxPTR " (%zu bytes); free its start",
                    status.block_start, status.block_bytes);
      return text;
    }
    case PointerStatus::Kind::freed:
      return "already freed";
    case PointerStatus::Kind::inside_free:
      return "not a live block: it points into free memory of this pool (already freed, or never allocated)";
  }
  return "unknown";
}

}  // namespace sova::detail
