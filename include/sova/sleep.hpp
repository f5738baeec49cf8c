// sova — SleepMode: what a pool's sleep does with the contents of its live
// blocks (Pool::sleep; docs/sleep-wake.md); SleepPinRefusal: what refused
// the host memory of its backup.
#pragma once

namespace sova {

enum class SleepMode {
  /// Live blocks' bytes are copied to pinned host memory before the physical
  /// memory goes, and copied back on wake: a model's weights.
  backup,
  /// Contents are dropped: after wake, live blocks hold undefined bytes
  /// (a KV cache, activations).
  discard,
  /// Contents are dropped, and wake zeroes the blocks still live: after wake
  /// they read zero for work ordered after it (a KV cache, counters or masks
  /// that assume zeroed memory). Costs one device memset of the live bytes on
  /// wake; needs a driver with memset_async (else the sleep is refused with
  /// cudaErrorNotSupported, nothing changed).
  discard_zeroed,
};

/// What refused the pinned host memory of a backup (Pool::sleep_pin_refusal),
/// in the last sleep or reserve_sleep_backup that pinned any: the limit to
/// raise (docs/sleep-wake.md, "The first sleep, and pinning ahead").
enum class SleepPinRefusal : unsigned char {
  /// No pin was refused (the last pinning succeeded, or none was made).
  none,
  /// The host refused to map the memory: out of host memory (or address
  /// space, or vm.max_map_count).
  host_memory,
  /// The driver refused to lock mapped memory (cudaHostRegister): the
  /// locked-memory limit (`ulimit -l`, RLIMIT_MEMLOCK) or the host's memory.
  lock,
  /// cudaHostAlloc refused (a driver without host mapping pins with it):
  /// the host's pinnable memory.
  pinned_alloc,
};

}  // namespace sova
