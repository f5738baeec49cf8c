#include "arena/arena.hpp"

#include <sova/error.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>

namespace sova::detail {

namespace {
std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }
}  // namespace

Arena::Arena(Driver& driver, int device, std::size_t granularity, std::size_t va_bytes, std::size_t max_physical,
             std::size_t max_chunk, const PhysicalProps& props)
    : driver_(driver),
      device_(device),
      granularity_(granularity),
      max_physical_(max_physical),
      max_chunk_granules_(max_chunk == 0 ? 0 : std::max<std::size_t>(1, max_chunk / granularity)),
      ghosts_(driver),
      props_(props) {
  if (va_bytes > SIZE_MAX - (granularity_ - 1)) {  // the round-up would wrap
    throw Error("sova: a VA range of " + std::to_string(va_bytes) +
                    " bytes cannot be reserved: rounded up to the granule it exceeds the address space",
                cudaErrorMemoryAllocation);
  }
  size_ = round_up(va_bytes, granularity_);
  cudaError_t error = driver_.address_reserve(size_, granularity_, &base_);
  if (error != cudaSuccess) {
    throw Error("sova: reserving " + std::to_string(size_) + " bytes of VA failed: " + cudaGetErrorName(error), error);
  }
  chunk_of_granule_.assign(size_ / granularity_, kUnbacked);
  ghosts_.cover(base_, granularity_, size_ / granularity_);
  backed_bits_.assign((chunk_of_granule_.size() + 63) / 64, 0);
  backed_words_.assign((backed_bits_.size() + 63) / 64, 0);
}

void Arena::mark(std::size_t first_granule, std::size_t granules, std::int32_t slot) noexcept {
  if (granules == 0) return;
  std::fill_n(chunk_of_granule_.begin() + static_cast<std::ptrdiff_t>(first_granule), granules, slot);
  for (std::size_t g = first_granule; g < first_granule + granules; ++g) {
    const std::uint64_t bit = std::uint64_t{1} << (g % 64);
    if (slot == kUnbacked) {
      backed_bits_[g / 64] &= ~bit;
    } else {
      backed_bits_[g / 64] |= bit;
    }
  }
  for (std::size_t w = first_granule / 64; w <= (first_granule + granules - 1) / 64; ++w) {
    const std::uint64_t bit = std::uint64_t{1} << (w % 64);
    if (backed_bits_[w] == 0) {
      backed_words_[w / 64] &= ~bit;
    } else {
      backed_words_[w / 64] |= bit;
    }
  }
}

std::size_t Arena::next_unbacked(std::size_t from, std::size_t end) const noexcept {
  std::size_t g = from;
  while (g < end) {
    const std::uint64_t word = ~backed_bits_[g / 64] >> (g % 64);
    if (word != 0) return std::min(end, g + static_cast<std::size_t>(std::countr_zero(word)));
    g = (g / 64 + 1) * 64;
  }
  return end;
}

std::size_t Arena::next_backed(std::size_t from, std::size_t end) const noexcept {
  std::size_t g = from;
  while (g < end) {
    const std::uint64_t word = backed_bits_[g / 64] >> (g % 64);
    if (word != 0) return std::min(end, g + static_cast<std::size_t>(std::countr_zero(word)));
    // The next word with a backed granule, from the summary: an arena is
    // mostly unbacked VA (its never-used tail), and remapping looks for
    // chunks across every free block on each miss that needs backing.
    std::size_t w = g / 64 + 1;
    while (w * 64 < end) {
      const std::uint64_t words = w % 64 == 0 ? backed_words_[w / 64] : backed_words_[w / 64] >> (w % 64);
      if (words != 0) {
        w += static_cast<std::size_t>(std::countr_zero(words));
        break;
      }
      w = (w / 64 + 1) * 64;
    }
    g = w * 64;
  }
  return end;
}

cudaError_t Arena::set_access_over(std::size_t first_granule, std::size_t granules) noexcept {
  try {
    const std::vector<cudaMemAccessDesc> descs = access_descs();
    return driver_.set_access(base_ + first_granule * granularity_, granules * granularity_, descs.data(),
                              descs.size());
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
}

cudaError_t Arena::grant_access(std::size_t first_granule, std::size_t granules) noexcept {
  if (const cudaError_t error = set_access_over(first_granule, granules); error != cudaSuccess) return error;
  for (std::size_t g = first_granule; g < first_granule + granules;) {
    const std::int32_t slot = chunk_of_granule_[g];
    if (slot == kUnbacked) {
      ++g;
      continue;
    }
    chunks_[slot].accessible = true;
    g = chunks_[slot].first_granule + chunks_[slot].granules;
  }
  return cudaSuccess;
}

cudaError_t Arena::map_chunk(const Chunk& chunk, bool with_access) noexcept {
  const std::uintptr_t va = base_ + chunk.first_granule * granularity_;
  const std::size_t bytes = chunk.granules * granularity_;
  cudaError_t error = driver_.map(va, bytes, chunk.handle);
  if (error != cudaSuccess || !with_access) return error;
  // Not grant_access: the chunk is not marked at its new place yet.
  error = set_access_over(chunk.first_granule, chunk.granules);
  if (error != cudaSuccess) driver_.unmap(va, bytes);
  return error;
}

Arena::~Arena() {
  if (abandoned_) return;                 // left to the process's end (abandon())
  ghosts_.set_settler(nullptr, nullptr);  // the caller guarantees the device no longer touches any of it
  // A chunk whose unmap fails is tried once more (a passing failure); one
  // that stays mapped after that keeps the reservation, which cannot be
  // freed under a mapping: both are left to the process's end.
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (std::size_t slot = 0; slot < chunks_.size(); ++slot) {
      if (chunks_[slot].granules != 0) destroy_chunk(static_cast<std::int32_t>(slot));
    }
  }
  if (live_chunks() == 0 && ghosts_.live() == 0) driver_.address_free(base_, size_);
}

std::vector<cudaMemAccessDesc> Arena::access_descs() const {
  std::vector<cudaMemAccessDesc> descs;
  descs.reserve(1 + peers_.size());
  cudaMemAccessDesc own{};
  own.location.type = cudaMemLocationTypeDevice;
  own.location.id = device_;
  own.flags = cudaMemAccessFlagsProtReadWrite;
  descs.push_back(own);
  if (props_.location.type == cudaMemLocationTypeHostNuma) {
    // A host memory pool: the host reads and writes it too (that is its point).
    cudaMemAccessDesc host = own;
    host.location.type = cudaMemLocationTypeHostNuma;
    host.location.id = props_.location.id;
    descs.push_back(host);
  }
  descs.insert(descs.end(), peers_.begin(), peers_.end());
  return descs;
}

cudaError_t Arena::create_chunk(std::size_t first_granule, std::size_t granules, std::int32_t* slot_out) noexcept {
  const std::size_t bytes = granules * granularity_;
  if (max_physical_ != 0 && backed_bytes_ + bytes > max_physical_) return cudaErrorMemoryAllocation;
  PhysicalHandle handle = 0;
  cudaError_t error = driver_.physical_create_with(props_, bytes, &handle);
  if (error != cudaSuccess) return error;
  const Chunk chunk{first_granule, granules, handle, next_serial_};
  error = map_chunk(chunk, /*with_access=*/false);  // commit grants access per run
  if (error != cudaSuccess) {
    driver_.physical_release(handle);
    return error;
  }
  std::int32_t slot;
  try {
    if (!free_chunk_slots_.empty()) {
      slot = free_chunk_slots_.back();
      free_chunk_slots_.pop_back();
    } else {
      chunks_.emplace_back();
      slot = static_cast<std::int32_t>(chunks_.size() - 1);
    }
  } catch (const std::bad_alloc&) {
    driver_.unmap(base_ + first_granule * granularity_, bytes);
    driver_.physical_release(handle);
    return cudaErrorMemoryAllocation;
  }
  chunks_[slot] = chunk;
  ++next_serial_;
  mark(first_granule, granules, slot);
  backed_bytes_ += bytes;
  backed_high_ = std::max(backed_high_, backed_bytes_);
  backed_peak_ = std::max(backed_peak_, backed_bytes_);
  ++chunks_mapped_;
  *slot_out = slot;
  return cudaSuccess;
}

bool Arena::destroy_chunk(std::int32_t slot) noexcept {
  if (!ghosts_.drop_of(slot)) return false;  // the memory goes back with the chunk's last mapping
  Chunk& chunk = chunks_[slot];
  const std::size_t bytes = chunk.granules * granularity_;
  // As unback_all does: a chunk whose mapping stays stays the arena's,
  // backed and counted, for a later release to try again. Released and
  // marked unbacked, its mapping would lie under "free" granules where every
  // later commit fails to map, and would keep the reservation from being freed.
  if (driver_.unmap(base_ + chunk.first_granule * granularity_, bytes) != cudaSuccess) return false;
  // Unmapped, the memory goes with the handle; a failed release has nothing
  // left to undo.
  (void)driver_.physical_release(chunk.handle);
  mark(chunk.first_granule, chunk.granules, kUnbacked);
  backed_bytes_ -= bytes;
  ++chunks_unmapped_;
  chunk = Chunk{};
  free_chunk_slots_.push_back(slot);  // capacity never shrinks below chunks_.size(): no throw
  return true;
}

std::size_t Arena::release_chunk(std::int32_t slot) noexcept {
  const std::size_t bytes = chunks_[slot].granules * granularity_;
  return destroy_chunk(slot) ? bytes : 0;
}

std::size_t Arena::chunk_granules(std::size_t chunk_limit) const noexcept {
  const std::size_t limit = chunk_limit == 0 ? 0 : std::max<std::size_t>(1, chunk_limit / granularity_);
  if (limit == 0) return max_chunk_granules_;
  return max_chunk_granules_ == 0 ? limit : std::min(limit, max_chunk_granules_);
}

std::size_t Arena::chunks_to_create(std::size_t offset, std::size_t bytes, std::size_t chunk_limit) const {
  const std::size_t max_granules = chunk_granules(chunk_limit);
  std::size_t chunks = 0;
  for_each_unbacked_run(offset, bytes, [&](std::size_t, std::size_t count) {
    chunks += max_granules == 0 ? 1 : (count + max_granules - 1) / max_granules;
  });
  return chunks;
}

cudaError_t Arena::commit(std::size_t offset, std::size_t bytes, std::size_t chunk_limit) noexcept {
  if (bytes == 0) return cudaSuccess;
  const std::size_t max_granules = chunk_granules(chunk_limit);
  if (offset > size_ || bytes > size_ - offset) return cudaErrorInvalidValue;
  const std::size_t first = offset / granularity_;
  const std::size_t last = (offset + bytes - 1) / granularity_;  // inclusive
  // Reserve slot capacity up front so destroy_chunk's push_back never throws.
  try {
    free_chunk_slots_.reserve(chunks_.size() + (last - first + 1));
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  std::vector<std::int32_t> created;
  try {
    created.reserve(last - first + 1);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  auto undo = [&] {
    while (!created.empty()) {
      destroy_chunk(created.back());
      created.pop_back();
    }
  };
  std::size_t granule = first;
  while (granule <= last) {
    if (chunk_of_granule_[granule] != kUnbacked) {
      ++granule;
      continue;
    }
    // One run of unbacked granules: chunks of at most max_chunk each, mapped,
    // then one access call over the whole run. On the H100 a grant costs
    // ~20-45 us per mapping it covers whatever the size, one call or several
    // (tools/probe_vmm_costs.cu): one call saves only the calls' own ~1 us.
    const std::size_t run_start = granule;
    std::size_t run_end = granule;  // inclusive
    while (run_end + 1 <= last && chunk_of_granule_[run_end + 1] == kUnbacked) ++run_end;
    if (!ghosts_.drop_in(run_start, run_end - run_start + 1)) {  // nothing else may be mapped there
      undo();
      return cudaErrorNotReady;
    }
    while (granule <= run_end) {
      const std::size_t granules =
          max_granules == 0 ? run_end - granule + 1 : std::min(max_granules, run_end - granule + 1);
      std::int32_t slot = kUnbacked;
      const cudaError_t error = create_chunk(granule, granules, &slot);
      if (error != cudaSuccess) {
        undo();
        return error;
      }
      created.push_back(slot);  // capacity reserved: no throw
      granule += granules;
    }
    if (const cudaError_t error = grant_access(run_start, run_end - run_start + 1); error != cudaSuccess) {
      undo();
      return error;
    }
  }
  return cudaSuccess;
}

std::size_t Arena::release_within(std::size_t offset, std::size_t bytes, std::size_t keep_at_least,
                                  bool may_cross) noexcept {
  if (bytes == 0 || offset >= size_) return 0;
  bytes = std::min(bytes, size_ - offset);
  // Only granules wholly inside the range can belong to a releasable chunk.
  const std::size_t first = round_up(offset, granularity_) / granularity_;
  const std::size_t end = (offset + bytes) / granularity_;  // exclusive
  std::size_t released = 0;
  std::size_t granule = first;
  while (backed_bytes_ > keep_at_least && (granule = next_backed(granule, end)) < end) {
    const std::int32_t slot = chunk_of_granule_[granule];
    const Chunk chunk = chunks_[slot];
    const bool wholly_inside = chunk.first_granule >= first && chunk.first_granule + chunk.granules <= end;
    if (wholly_inside) {
      const std::size_t chunk_bytes = chunk.granules * granularity_;
      if (!may_cross && backed_bytes_ < keep_at_least + chunk_bytes) break;  // would fall below what the caller keeps
      if (destroy_chunk(slot)) released += chunk_bytes;
    }
    granule = chunk.first_granule + chunk.granules;
  }
  return released;
}

void Arena::chunks_within(std::size_t offset, std::size_t bytes, std::vector<ChunkRef>& out) const {
  if (bytes == 0 || offset >= size_) return;
  bytes = std::min(bytes, size_ - offset);
  const std::size_t first = round_up(offset, granularity_) / granularity_;
  const std::size_t end = (offset + bytes) / granularity_;  // exclusive
  std::size_t granule = first;
  while ((granule = next_backed(granule, end)) < end) {
    const std::int32_t slot = chunk_of_granule_[granule];
    const Chunk& chunk = chunks_[slot];
    if (chunk.first_granule >= first && chunk.first_granule + chunk.granules <= end) {
      out.push_back(ChunkRef{slot, chunk.first_granule, chunk.granules});
    }
    granule = chunk.first_granule + chunk.granules;
  }
}

cudaError_t Arena::move_chunk(std::int32_t slot, std::size_t to_granule, bool with_access, bool* mapped,
                              const GhostPin* pin) noexcept {
  const GhostPin leaving = pin != nullptr ? *pin : GhostPin{};
  Chunk& chunk = chunks_[slot];
  const std::size_t bytes = chunk.granules * granularity_;
  if (to_granule + chunk.granules > chunk_of_granule_.size() ||
      next_backed(to_granule, to_granule + chunk.granules) != to_granule + chunk.granules) {
    return cudaErrorInvalidValue;
  }
  const std::size_t from_granule = chunk.first_granule;
  if (mapped != nullptr) *mapped = false;
  if (ghosts_.move_back(slot, chunk.granules, from_granule, to_granule, chunk.accessible, leaving)) {
    // Back to a place the chunk left: still mapped, with its access.
    chunk.accessible = true;
    mark(from_granule, chunk.granules, kUnbacked);
    chunk.first_granule = to_granule;
    mark(to_granule, chunk.granules, slot);
    ++chunks_moved_;
    ++ghost_moves_;
    bytes_moved_ += bytes;
    return cudaSuccess;
  }
  // Room for the ghost of the place it leaves (its oldest goes), and nothing
  // else mapped at the new place (ghosts of other chunks, or of this one at
  // an overlapping place): both unmap ghosts, each after its pin settles.
  // The old mapping stays until the new one is made: on failure nothing has
  // changed but ghosts gone.
  if (!ghosts_.make_room(slot)) return cudaErrorNotReady;
  if (!ghosts_.drop_in(to_granule, chunk.granules)) return cudaErrorNotReady;
  const std::int32_t record = ghosts_.acquire(slot);
  // Without a record the old place is unmapped at once: not while work may use it.
  if (record == GhostMappings::kNone && leaving.owner != nullptr) return cudaErrorMemoryAllocation;
  chunk.first_granule = to_granule;
  const cudaError_t error = map_chunk(chunk, with_access);
  chunk.first_granule = from_granule;
  if (error != cudaSuccess) {
    if (record != GhostMappings::kNone) ghosts_.give_back(record);
    return error;
  }
  mark(from_granule, chunk.granules, kUnbacked);
  if (record != GhostMappings::kNone) {
    ghosts_.keep(record, slot, chunk.granules, from_granule, chunk.accessible, leaving);
  } else {
    driver_.unmap(base_ + from_granule * granularity_, bytes);  // as without ghosts
  }
  chunk.first_granule = to_granule;
  chunk.accessible = with_access;
  mark(to_granule, chunk.granules, slot);
  ++chunks_moved_;
  bytes_moved_ += bytes;
  if (mapped != nullptr) *mapped = true;
  return cudaSuccess;
}

std::size_t Arena::ghost_within(std::int32_t slot, std::size_t first_granule, std::size_t granules) const noexcept {
  return ghosts_.find_within(slot, chunks_[slot].granules, first_granule, granules,
                             [this](std::size_t at, std::size_t n) { return next_backed(at, at + n) == at + n; });
}

std::size_t Arena::backed_prefix(std::size_t offset, std::size_t bytes) const noexcept {
  if (bytes == 0) return 0;
  const std::size_t first = offset / granularity_;
  const std::size_t end = (offset + bytes - 1) / granularity_ + 1;
  const std::size_t g = next_unbacked(first, end);
  if (g == end) return bytes;
  const std::size_t backed_end = g * granularity_;
  return backed_end > offset ? backed_end - offset : 0;
}

std::size_t Arena::backed_granules(std::size_t first, std::size_t end) const noexcept {
  std::size_t count = 0;
  std::size_t g = first;
  while (g < end) {
    const std::size_t in_word = std::min<std::size_t>(64 - g % 64, end - g);
    std::uint64_t word = backed_bits_[g / 64] >> (g % 64);
    if (in_word < 64) word &= (std::uint64_t{1} << in_word) - 1;
    count += static_cast<std::size_t>(std::popcount(word));
    g += in_word;
  }
  return count;
}

bool Arena::is_backed(std::size_t offset, std::size_t bytes) const noexcept {
  if (bytes == 0) return true;
  const std::size_t first = offset / granularity_;
  const std::size_t end = (offset + bytes - 1) / granularity_ + 1;
  return next_unbacked(first, end) == end;
}

std::size_t Arena::backed_bytes_in(std::size_t offset, std::size_t bytes) const noexcept {
  if (bytes == 0) return 0;
  const std::size_t first = offset / granularity_;
  const std::size_t end = (offset + bytes - 1) / granularity_ + 1;
  return backed_granules(first, end) * granularity_;
}

cudaError_t Arena::set_peer_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept {
  if (count == 0) return cudaSuccess;
  if (descs == nullptr) return cudaErrorInvalidValue;
  int device_count = 0;
  if (driver_.device_count(&device_count) != cudaSuccess) return cudaErrorInvalidDevice;
  try {
    std::vector<cudaMemAccessDesc> peers = peers_;
    for (std::size_t i = 0; i < count; ++i) {
      const cudaMemAccessDesc& desc = descs[i];
      if (desc.location.type != cudaMemLocationTypeDevice) return cudaErrorInvalidValue;
      if (desc.location.id < 0 || desc.location.id >= device_count) return cudaErrorInvalidDevice;
      if (desc.location.id == device_) {
        // The owner keeps read-write access: the runtime refuses anything else.
        if (desc.flags != cudaMemAccessFlagsProtReadWrite) return cudaErrorInvalidDevice;
        continue;
      }
      auto same = [&](const cudaMemAccessDesc& p) { return p.location.id == desc.location.id; };
      peers.erase(std::remove_if(peers.begin(), peers.end(), same), peers.end());
      if (desc.flags != cudaMemAccessFlagsProtNone) peers.push_back(desc);
    }
    // Ghosts keep the access they were mapped with: unmap them all.
    if (!ghosts_.drop_all()) return cudaErrorNotReady;
    // Apply to every mapped chunk; on failure restore the previous access.
    std::vector<cudaMemAccessDesc> apply = peers;
    for (std::size_t i = 0; i < count; ++i) {
      if (descs[i].location.id != device_ && descs[i].flags == cudaMemAccessFlagsProtNone) apply.push_back(descs[i]);
    }
    for (std::size_t slot = 0; slot < chunks_.size(); ++slot) {
      const Chunk& chunk = chunks_[slot];
      if (chunk.granules == 0 || apply.empty()) continue;
      cudaError_t error = driver_.set_access(base_ + chunk.first_granule * granularity_, chunk.granules * granularity_,
                                             apply.data(), apply.size());
      if (error != cudaSuccess) return error;
    }
    peers_ = std::move(peers);
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

bool Arena::chunks_touching(std::size_t offset, std::size_t bytes, std::vector<ChunkInfo>& out) const {
  if (bytes == 0 || offset >= size_ || bytes > size_ - offset) return false;
  const std::size_t first = offset / granularity_;
  const std::size_t end = (offset + bytes - 1) / granularity_ + 1;
  if (backed_granules(first, end) != end - first) return false;
  std::size_t granule = first;
  while (granule < end) {
    const Chunk& chunk = chunks_[chunk_of_granule_[granule]];
    out.push_back(ChunkInfo{chunk.first_granule, chunk.granules, chunk.handle, chunk.serial});
    granule = chunk.first_granule + chunk.granules;
  }
  return true;
}

cudaMemAccessFlags Arena::access_of(int device) const noexcept {
  if (device == device_) return cudaMemAccessFlagsProtReadWrite;
  for (const cudaMemAccessDesc& peer : peers_) {
    if (peer.location.id == device) return peer.flags;
  }
  return cudaMemAccessFlagsProtNone;
}

}  // namespace sova::detail
