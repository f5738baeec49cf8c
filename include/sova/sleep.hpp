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
};

}  // namespace sova
