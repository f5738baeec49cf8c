// sova_sleep_wake's drift mode: does a pool that sleeps and wakes many times
// hold on to anything a cycle leaves behind?
#pragma once

#include <cstddef>

namespace sova::sleep_bench {

/// One pool of `bytes` in blocks of `block_bytes`, each filled with its own
/// pseudo-random bytes; then `cycles` sleep (backup) / wake cycles. At cycle
/// 1 and at the last cycle: the device's free memory asleep against before
/// the pool existed (in granules per chunk), the pinned host memory the pool
/// keeps, the process's resident memory (/proc/self/statm), the pool's
/// reserved bytes awake. Drift, any of: the device's free memory asleep lower
/// at the last cycle than at the first, or more than a granule per chunk
/// below what it was before the pool; the host memory kept or the reserved
/// bytes changed; the resident memory grown by more than kRssSlackBytes; a
/// byte of any block not what it was before the first sleep (all compared).
/// Prints both samples and the verdict, appends a JSON record to
/// `json_path` (if any); returns 0 without drift, 1 with.
int run_drift(int cycles, std::size_t bytes, std::size_t block_bytes, const char* json_path);

/// The resident memory's allowance: the C library's and the CUDA driver's
/// own heaps may settle by a few pages; a leak of one backup per cycle is
/// gigabytes.
inline constexpr std::size_t kRssSlackBytes = std::size_t{16} << 20;

}  // namespace sova::sleep_bench
