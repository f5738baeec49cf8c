// sova — SleepMode: what a pool's sleep does with the contents of its live
// blocks (Pool::sleep; docs/sleep-wake.md).
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

}  // namespace sova
