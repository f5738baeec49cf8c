// sova_sleep_wake's first-sleep mode: what pin-ahead (PoolOptions::
// sleep_pin_ahead) saves the first sleep of a pool, which otherwise pins its
// backup's host memory at the host's pinning rate.
#pragma once

#include <cstddef>
#include <vector>

namespace sova::sleep_bench {

/// For each size (GiB), two pools in turn, without and with pin-ahead, each
/// filled with blocks of `block_bytes`: with pin-ahead, the time until the
/// background thread has pinned its target (polled); then the first sleep
/// (backup), a wake, and a second, warm sleep, which pins nothing, and a
/// wake. Prints each pool's first and warm sleep times, their ratio (first /
/// warm, in the same run), the host memory kept and the host allocations
/// the first sleep made (sleep_pin_ahead_bytes against sleep_host_bytes),
/// and the resident memory once the backup is released
/// (release_sleep_host_memory) against before the first sleep (rss_released,
/// MiB: the backup's pages given back leave it near 0);
/// appends a JSON record per pool to `json_path` (if any). Returns 0 when
/// every call succeeded, 1 otherwise.
int run_first_sleep(const std::vector<double>& sizes_gib, std::size_t block_bytes, const char* json_path);

}  // namespace sova::sleep_bench
