// The release worker: one background thread per process that gives cached
// physical memory above a pool's release threshold back to the device once
// the pool has gone quiet.
//
// Why a thread: the driver releases at synchronize calls (cudaStreamSynchronize
// and friends), which it sees and sova does not. Releasing on the pool's own
// calls instead would unmap memory a busy loop is about to reuse (50 us per
// 2 MiB chunk to map again). So sova waits for a pool to be idle — no
// allocation or free for a whole period — then releases what is known safe.
// The thread runs only while pools exist; it holds no pool lock while asleep.
#pragma once

#include <chrono>

namespace sova::detail {

class PoolCore;

/// How often the worker looks at each pool; a pool must stay idle between two
/// looks to be trimmed.
inline constexpr std::chrono::milliseconds kReleasePeriod{20};

/// Registers a pool with the worker (starting the thread if needed).
void register_for_release(PoolCore* pool);
/// Unregisters; when it returns, the worker is not touching `pool` and will not.
void unregister_for_release(PoolCore* pool) noexcept;

}  // namespace sova::detail
