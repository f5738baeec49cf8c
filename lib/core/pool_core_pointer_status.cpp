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
  status = heap_.status_of(offset);
  if (status.kind == PointerStatus::Kind::live || status.kind == PointerStatus::Kind::inside_live) {
    status.block_start += arena_.base();
  }
  return status;
}

std::string describe_pointer_status(const PointerStatus& status) {
  switch (status.kind) {
    case PointerStatus::Kind::outside: return "not allocated by this pool";
    case PointerStatus::Kind::live: return "a live block of this pool";
    case PointerStatus::Kind::inside_live: {
      char text[128];
      std::snprintf(text, sizeof text, "inside a block allocated at %#" PRIxPTR " (%zu bytes); free its start",
                    status.block_start, status.block_bytes);
      return text;
    }
    case PointerStatus::Kind::freed: return "already freed";
    case PointerStatus::Kind::inside_free:
      return "not a live block: it points into free memory of this pool (already freed, or never allocated)";
  }
  return "unknown";
}

}  // namespace sova::detail
