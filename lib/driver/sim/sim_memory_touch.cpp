// sova sim — what modelled device work touches (SimMemory::copy, touch):
// checked at the moment the work runs, under the memory's lock, so that an
// unmap racing with a copy is caught whichever comes first, and reported in
// words instead of a SIGSEGV on a stream worker.
#include "sim_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace sova::sim {
namespace {

/// "what at 0x.. (in [0x.., 0x..))", formatted without std::string
/// concatenation (which GCC 12 at -O3 warns about falsely, -Wrestrict).
std::string words(const char* what, std::uintptr_t at, std::uintptr_t va, std::uintptr_t end) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "0x%llx (in [0x%llx, 0x%llx)) %s", static_cast<unsigned long long>(at),
                static_cast<unsigned long long>(va), static_cast<unsigned long long>(end), what);
  return buf;
}

}  // namespace

bool SimMemory::touchable(std::uintptr_t va, std::size_t bytes, bool write, std::string* why) const {
  if (bytes == 0) return true;
  const std::uintptr_t end = va + bytes;
  // The last reservation starting at or before the range's last byte: if it
  // ends before the range, so do all before it (reservations do not overlap).
  auto r = reservations_.upper_bound(end - 1);
  if (r == reservations_.begin()) return true;
  --r;
  if (r->first + r->second <= va) return true;  // host memory
  if (va < r->first || end > r->first + r->second) {
    *why = words("runs past the edge of its reservation", va, va, end);
    return false;
  }
  std::uintptr_t cursor = va;
  auto m = mappings_.upper_bound(va);  // the first mapping starting after va
  if (m != mappings_.begin() && std::prev(m)->first + std::prev(m)->second.bytes > va) --m;
  while (cursor < end) {
    if (m == mappings_.end() || m->first > cursor) {
      *why = words("is reserved but not mapped", cursor, va, end);
      return false;
    }
    cudaMemAccessFlags best = cudaMemAccessFlagsProtNone;
    for (cudaMemAccessFlags f : m->second.access) best = std::max(best, f);
    const bool ok = write ? best == cudaMemAccessFlagsProtReadWrite : best != cudaMemAccessFlagsProtNone;
    if (!ok) {
      *why = words(write ? "is mapped without write access" : "is mapped without read access", cursor, va, end);
      return false;
    }
    cursor = m->first + m->second.bytes;
    ++m;
  }
  return true;
}

bool SimMemory::copy(void* dst, const void* src, std::size_t bytes, std::string* why) {
  std::lock_guard lock(mu_);
  if (!touchable(reinterpret_cast<std::uintptr_t>(src), bytes, false, why)) {
    why->insert(0, "reading ");
    return false;
  }
  if (!touchable(reinterpret_cast<std::uintptr_t>(dst), bytes, true, why)) {
    why->insert(0, "writing ");
    return false;
  }
  std::memcpy(dst, src, bytes);
  return true;
}

bool SimMemory::touch(const void* ptr, std::size_t bytes, bool write, const std::function<void()>& work,
                      std::string* why) {
  std::lock_guard lock(mu_);
  if (!touchable(reinterpret_cast<std::uintptr_t>(ptr), bytes, write, why)) return false;
  if (work) work();
  return true;
}

}  // namespace sova::sim
