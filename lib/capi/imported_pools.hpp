// sova C API — pools imported from another process (capi_ipc.cpp). Their
// sovaMemPool_t values carry their own tag (0b1101, where the handle table's
// is 0b0101), so no function mistakes one kind for the other; they live in a
// mutex-guarded map, since nothing about them is on a fast path.
#pragma once

#include <cuda_runtime_api.h>

#include <sova/sova.h>

#include <cstdint>

namespace sova::capi {

inline constexpr std::uintptr_t kImportedTag = 0b1101;
inline bool is_imported_handle(sovaMemPool_t pool) noexcept {
  return (reinterpret_cast<std::uintptr_t>(pool) & 0xf) == kImportedTag;
}

/// sovaFreeAsync of a pointer no local pool owns: the importer's free of an
/// imported block (ImportedPool::free_pointer), else cudaErrorInvalidValue.
cudaError_t free_imported(void* ptr, cudaStream_t stream) noexcept;
cudaError_t destroy_imported(sovaMemPool_t pool) noexcept;
cudaError_t set_imported_access(sovaMemPool_t pool, const cudaMemAccessDesc* descs, size_t count) noexcept;
cudaError_t get_imported_access(cudaMemAccessFlags* flags, sovaMemPool_t pool,
                                const cudaMemLocation* location) noexcept;

}  // namespace sova::capi
