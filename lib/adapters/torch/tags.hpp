// sova_torch — allocation tags: a tag chosen per thread (sova_torch_set_tag)
// routes the thread's allocations to that tag's own pool on each device, so
// that a tag's memory can sleep and wake alone (sovaMemPoolSleep on the pool
// sova_torch_tag_pool names). Tag 0 is the untagged default: the device's
// pool (sova_torch_pool). Frees need no tag: sovaFreeAsync finds a block's
// pool by its address.
#pragma once

#include "sova_torch.h"

#include <cstdint>

namespace sova::torch_adapter {

/// Tags 1 .. kMaxTags - 1 name pools of their own.
constexpr int kMaxTags = 64;

/// The calling thread's tag (0: none).
int current_tag() noexcept;
/// `tag`'s pool on `device`, created on first use with the adapter's
/// options (not made the device's current pool). Sets the message and
/// returns the error on failure.
cudaError_t tagged_pool_for(int tag, int device, sovaMemPool_t* out) noexcept;
/// The sum of attribute `attr` (a byte count) over the tags' pools of `device`.
std::uint64_t tag_pools_attribute(int device, cudaMemPoolAttr attr) noexcept;
/// sovaMemPoolTrimTo(pool, 0) on every tag's pool of `device`.
void trim_tag_pools(int device) noexcept;

}  // namespace sova::torch_adapter
