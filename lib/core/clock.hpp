// The monotonic clock the pool stamps fences with (StreamState::last_fence_ns).
// ~36-50 ns a read on the lent H100's host: kept off the fast path except for
// every 16th large free (stream_caches.hpp, kClockEvery).
#pragma once

#include <chrono>
#include <cstdint>

namespace sova::detail {

inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace sova::detail
