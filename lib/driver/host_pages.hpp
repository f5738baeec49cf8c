// sova — host memory mapped to be pinned later (Driver::host_map and
// host_unmap), shared by the CUDA driver and the simulation: both map the
// same way, so that a test on the simulation runs the pages a GPU host would.
//
// Why not cudaHostAlloc: it faults and pins its pages itself, serialized in
// the driver (1.7 GiB/s from one thread, 2.0 GiB/s from eight, on an H200
// host, a probe). Memory mapped here, advised to huge pages, its
// pages faulted in by several threads and then registered, pinned at
// 14.5-19.2 GiB/s on the same host (the same probe).
#pragma once

#include <cstddef>

namespace sova::driver_detail {

/// Alignment and granule of what map_host_pages gives: a transparent huge page.
inline constexpr std::size_t kHostPageAlignment = std::size_t{2} << 20;

/// What map_host_pages maps for `bytes`: rounded up to kHostPageAlignment
/// (0 where that overflows).
std::size_t host_pages_span(std::size_t bytes) noexcept;
/// host_pages_span(bytes) of anonymous private memory, aligned to
/// kHostPageAlignment, advised MADV_HUGEPAGE where the host has it (an
/// advice: refused, the memory is mapped with small pages) and
/// MADV_DONTFORK (a child of fork() does not inherit it). nullptr when the
/// host refuses the mapping (errno says why) or `bytes` is 0.
void* map_host_pages(std::size_t bytes) noexcept;
/// munmap of what map_host_pages(bytes) gave: 0, or -1 with errno.
int unmap_host_pages(void* ptr, std::size_t bytes) noexcept;

}  // namespace sova::driver_detail
