// map_host_pages (host_pages.hpp): over-map by one huge page, then trim the
// head and the tail so that the range starts on a huge page: a range that
// does not start on one gets small pages for its first and last few MiB.
#include "driver/host_pages.hpp"

#include <sys/mman.h>

#include <cstdint>

namespace sova::driver_detail {

std::size_t host_pages_span(std::size_t bytes) noexcept {
  if (bytes > SIZE_MAX - 2 * kHostPageAlignment) return 0;  // room for the over-map below too
  return (bytes + kHostPageAlignment - 1) / kHostPageAlignment * kHostPageAlignment;
}

void* map_host_pages(std::size_t asked) noexcept {
  const std::size_t bytes = host_pages_span(asked);
  if (bytes == 0) return nullptr;
  const std::size_t span = bytes + kHostPageAlignment;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + kHostPageAlignment - 1) / kHostPageAlignment * kHostPageAlignment;
  const std::size_t head = aligned - start;
  const std::size_t tail = span - head - bytes;
  // Trimming splits the mapping, which fails only at the process's mapping
  // limit (vm.max_map_count): then the whole of it goes (unmapping a whole
  // mapping splits nothing), and the host refused.
  if (head != 0 && munmap(raw, head) != 0) {
    (void)munmap(raw, span);
    return nullptr;
  }
  if (tail != 0 && munmap(reinterpret_cast<void*>(aligned + bytes), tail) != 0) {
    (void)munmap(reinterpret_cast<void*>(aligned), bytes + tail);
    return nullptr;
  }
  void* p = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  (void)madvise(p, bytes, MADV_HUGEPAGE);  // an advice: a host without THP maps small pages
#endif
  // Not inherited by a child of fork(): a kernel that copies pinned pages at
  // fork would copy the whole backup (gigabytes) for a child that never uses
  // it, and one that does not would share them copy-on-write under the
  // device's copies. Where refused, the mapping is inherited as any other.
  (void)madvise(p, bytes, MADV_DONTFORK);
  return p;
}

int unmap_host_pages(void* ptr, std::size_t bytes) noexcept { return munmap(ptr, host_pages_span(bytes)); }

}  // namespace sova::driver_detail
