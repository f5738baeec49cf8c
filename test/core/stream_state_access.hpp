// StreamStateTestAccess: the tests' narrow door into a StreamState's private
// fields (lib/core/stream_state.hpp, which befriends it), for tests that
// drive StreamRegistry alone and check its epochs and fences without a pool's
// frees. Each member reads or sets one field as StreamCaches would; nothing
// here is declared or used by the library.
#pragma once

#include "core/stream_state.hpp"

#include <cstddef>
#include <cstdint>

namespace sova::detail {

struct StreamStateTestAccess {
  /// The state's spin lock, for the registry's *_locked members.
  static SpinLock& lock(StreamState& s) noexcept { return s.lock; }
  /// The epoch stamped on frees now.
  static std::uint64_t epoch(const StreamState& s) noexcept { return s.epoch; }
  /// Frees stamped <= this are known complete.
  static std::uint64_t safe_epoch(const StreamState& s) noexcept { return s.safe_epoch; }
  /// Fences recorded, not yet seen complete.
  static std::size_t fences(const StreamState& s) noexcept { return s.fences.size(); }
  static bool retired(const StreamState& s) noexcept { return s.retired.load(); }
  static bool open_epoch_has_frees(const StreamState& s) noexcept { return s.open_epoch_has_frees; }
  /// What StreamCaches::cache_freed does to the epochs for a free: the open
  /// epoch now has one (the test's stand-in for a cached block).
  static void stamp_free(StreamState& s) noexcept { s.open_epoch_has_frees = true; }
  /// What another stream's miss does when it finds this one's frees pending
  /// behind no fence (StreamCaches::give_to_heap): asks it for a fence.
  static void request_fence(StreamState& s) noexcept { s.fence_requested.store(true); }
};

}  // namespace sova::detail
