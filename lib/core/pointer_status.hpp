// PointerStatus: what an address is to one pool, so that a refused free can
// say what happened (a foreign pointer, an interior pointer, a double free)
// instead of only cudaErrorInvalidValue. Read by PoolCore::pointer_status
// (pool_core_pointer_status.cpp); worded by describe_pointer_status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sova::detail {

struct PointerStatus {
  enum class Kind : std::uint8_t {
    outside,      ///< not in the pool's address range: not allocated by this pool
    live,         ///< the start of a live block
    inside_live,  ///< inside a live block, not at its start
    freed,        ///< the start of a block freed and cached by a stream: a double free
    inside_free,  ///< in free memory of the heap: freed earlier (and merged), or never handed out
  };
  Kind kind = Kind::outside;
  /// inside_live: the live block's address and the bytes it was allocated with.
  std::uintptr_t block_start = 0;
  std::size_t block_bytes = 0;
};

/// What `status` says about `ptr`, as the end of an error message: "not
/// allocated by this pool", "already freed", "inside a block allocated at
/// 0x... (N bytes); free its start", ... Without a leading capital or a
/// trailing full stop.
std::string describe_pointer_status(const PointerStatus& status);

}  // namespace sova::detail
