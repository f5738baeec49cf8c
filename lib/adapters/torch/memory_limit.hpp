// sova_torch — the per-process memory fraction (sova_torch_set_memory_fraction):
// what the limit counts on a device, and the release an allocation crossing
// it tries first.
#pragma once

#include "sova_torch.h"

#include <cstdint>

namespace sova::torch_adapter {

/// Bytes the limit counts on `device` for `attr` (cudaMemPoolAttrReservedMemCurrent
/// or cudaMemPoolAttrUsedMemCurrent): the device's pool and its tags' pools,
/// plus the external-reserved function's figure (for both attributes: what
/// lies outside the adapter is reserved, and live as far as it knows).
std::uint64_t limit_counted(int device, cudaMemPoolAttr attr) noexcept;
/// Gives the free physical memory of the device's pool and its tags' pools back.
void release_free_memory(int device) noexcept;

}  // namespace sova::torch_adapter
