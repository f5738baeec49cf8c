// sova — arena layer: one pool's reserved VA range and the physical chunks
// mapped under it.
//
// The arena knows nothing of blocks or streams: it answers "make these bytes
// backed" and "give back the chunks lying wholly inside this range". Physical
// memory is created in chunks of up to max_chunk per run of unbacked granules:
// a 32 MiB chunk costs one create/map/set-access round (~50 us on H100), as
// much as a 2 MiB one (docs/design.md, "The arena"); the price is that a
// chunk can only be released whole, once every byte of it is free. The old
// places of moved chunks are GhostMappings' (ghost_mappings.hpp).
//
// Not thread-safe: the pool calls it under its heap lock.
#pragma once

#include "arena/ghost_mappings.hpp"

#include <sova/driver.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sova::detail {

class Arena {
 public:
  /// Reserves `va_bytes` (rounded up to the granularity) of VA for `device`.
  /// `max_physical` caps backed bytes (0 = no cap). Throws sova::Error.
  /// `props`: what every chunk is created with (location, handle types,
  /// compression; physical_options.hpp); a host-NUMA location also gets the
  /// host's access to every chunk.
  Arena(Driver& driver, int device, std::size_t granularity, std::size_t va_bytes, std::size_t max_physical,
        std::size_t max_chunk, const PhysicalProps& props = PhysicalProps{});
  /// Unmaps and releases every chunk and frees the reservation. The caller
  /// guarantees the device no longer touches any of it.
  ~Arena();
  /// The device could not be waited for (a capture runs on it) while work
  /// queued on this memory may still run: the destructor then leaves every
  /// mapping, handle and the reservation to the process's end instead of
  /// unmapping them under that work. Called by the pool's destructor only.
  void abandon() noexcept { abandoned_ = true; }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  std::uintptr_t base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t granularity() const noexcept { return granularity_; }
  bool contains(std::uintptr_t address) const noexcept {
    return address - base_ < size_;  // unsigned wrap makes addresses below base fail too
  }

  /// Backs every granule overlapping [offset, offset + bytes): new chunks for
  /// each run of unbacked granules, at most max_chunk each (and at most
  /// `chunk_limit`, rounded down to granules, when it is not 0), mapped and
  /// made accessible to the owning device and every peer granted by
  /// set_access. On failure everything this call created is undone and the
  /// error returned: cudaErrorMemoryAllocation when the device or
  /// max_physical has no room, else the driver's error.
  cudaError_t commit(std::size_t offset, std::size_t bytes, std::size_t chunk_limit = 0) noexcept;

  /// Unmaps and releases the chunks lying wholly inside [offset, offset + bytes)
  /// while backed bytes exceed `keep_at_least` (a chunk that cannot go, as
  /// release_chunk says, is skipped and stays). A chunk whose release would
  /// take them below it is kept, unless `may_cross`: then the last chunk
  /// released may (the caller needs at least backed - keep_at_least bytes
  /// gone, and chunks come whole). Returns the bytes released. The caller
  /// guarantees no pending work touches the range.
  std::size_t release_within(std::size_t offset, std::size_t bytes, std::size_t keep_at_least = 0,
                             bool may_cross = false) noexcept;

  /// A physical chunk lying wholly inside some range (chunks_within).
  struct ChunkRef {
    std::int32_t slot = -1;
    std::size_t first_granule = 0;
    std::size_t granules = 0;
  };
  /// Appends the chunks lying wholly inside [offset, offset + bytes). Skips
  /// unbacked stretches a 64-granule word at a time. Throws std::bad_alloc.
  void chunks_within(std::size_t offset, std::size_t bytes, std::vector<ChunkRef>& out) const;
  /// The runs of unbacked granules overlapping [offset, offset + bytes), as
  /// (first granule, count). Throws std::bad_alloc.
  std::vector<std::pair<std::size_t, std::size_t>> unbacked_runs(std::size_t offset, std::size_t bytes) const {
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    unbacked_runs(offset, bytes, runs);
    return runs;
  }
  /// The same into `out` (cleared first): remapping keeps one vector for
  /// them instead of allocating one a growth. Throws std::bad_alloc.
  void unbacked_runs(std::size_t offset, std::size_t bytes,
                     std::vector<std::pair<std::size_t, std::size_t>>& out) const {
    out.clear();
    for_each_unbacked_run(offset, bytes,
                          [&](std::size_t granule, std::size_t count) { out.emplace_back(granule, count); });
  }
  /// Calls f(first granule, count) for each of those runs, in address order.
  template <class F>
  void for_each_unbacked_run(std::size_t offset, std::size_t bytes, F&& f) const {
    if (bytes == 0) return;
    const std::size_t end = (offset + bytes - 1) / granularity_ + 1;  // exclusive
    std::size_t granule = offset / granularity_;
    while ((granule = next_unbacked(granule, end)) < end) {
      const std::size_t run_end = next_backed(granule, end);
      f(granule, run_end - granule);
      granule = run_end;
    }
  }
  /// Work that may still use a place a chunk leaves (GhostMappings::Pin).
  using GhostPin = GhostMappings::Pin;
  /// Called before a pinned ghost is unmapped, under the caller's lock
  /// (GhostMappings::Settler). When it returns false the ghost stays, and
  /// what needed it gone fails (move_chunk, commit: cudaErrorNotReady;
  /// release_chunk: 0).
  using GhostSettler = GhostMappings::Settler;
  void set_ghost_settler(GhostSettler settler, void* context) noexcept { ghosts_.set_settler(settler, context); }

  /// Moves chunk `slot` so that it backs the granules from `to_granule` on,
  /// which must all be unbacked: map at the new VA (ghosts there unmapped
  /// first) and, with `with_access`, set access there; without, the caller
  /// must grant_access before the memory is used. The old place is kept as
  /// a ghost. The caller guarantees no work touches the chunk's old range.
  /// On failure nothing has changed (the chunk is still mapped where it
  /// was, nothing is mapped at the new place) and the driver's error is
  /// returned; cudaErrorInvalidValue if a granule there is backed.
  /// A move back to a ghost of the chunk (a place it left, still mapped)
  /// makes no driver call; `*mapped`, when given, says whether this move
  /// mapped the chunk anew (and so needs grant_access without `with_access`).
  ///
  /// `pin`: work that may still use the old place (frees there that are not
  /// known complete, all of one stream; GhostPin). The old mapping then stays
  /// until the settler says that work is done: a ghost is never unmapped
  /// before. cudaErrorNotReady when a ghost in the way could not be settled.
  cudaError_t move_chunk(std::int32_t slot, std::size_t to_granule, bool with_access = true, bool* mapped = nullptr,
                         const GhostPin* pin = nullptr) noexcept;
  /// Where chunk `slot` has a ghost lying wholly inside the unbacked granules
  /// [first_granule, first_granule + granules): its first granule, or
  /// kNoGhost. A move there costs nothing.
  static constexpr std::size_t kNoGhost = GhostMappings::kNotFound;
  std::size_t ghost_within(std::int32_t slot, std::size_t first_granule, std::size_t granules) const noexcept;
  /// Unmaps and releases chunk `slot` (a ChunkRef's). The caller guarantees
  /// no pending work touches it where it is; its ghosts' pins are settled
  /// first. Returns its bytes, or 0 (nothing released: the chunk stays the
  /// arena's, backed and counted) when a pin could not be settled or an
  /// unmap failed.
  std::size_t release_chunk(std::int32_t slot) noexcept;
  /// How many chunks commit() would create to back [offset, offset + bytes)
  /// with the same `chunk_limit`.
  std::size_t chunks_to_create(std::size_t offset, std::size_t bytes, std::size_t chunk_limit = 0) const;
  /// Sets the owner's and the peers' access over granules that are all
  /// mapped (one driver call for any number of chunks).
  cudaError_t grant_access(std::size_t first_granule, std::size_t granules) noexcept;

  /// True when every granule overlapping the range is backed.
  bool is_backed(std::size_t offset, std::size_t bytes) const noexcept;
  /// How many bytes from `offset` on, up to `bytes`, are backed without a gap.
  std::size_t backed_prefix(std::size_t offset, std::size_t bytes) const noexcept;
  /// Unbacked bytes of the granules overlapping the range.
  std::size_t unbacked_bytes_in(std::size_t offset, std::size_t bytes) const noexcept {
    if (bytes == 0) return 0;
    const std::size_t first = offset / granularity_;
    const std::size_t end = (offset + bytes - 1) / granularity_ + 1;
    return (end - first) * granularity_ - backed_bytes_in(offset, bytes);
  }
  /// Backed bytes inside the range (whole granules overlapping it).
  std::size_t backed_bytes_in(std::size_t offset, std::size_t bytes) const noexcept;

  /// Access for other devices, applied to every chunk now and later. The owning
  /// device always keeps read-write access (cudaErrorInvalidDevice otherwise,
  /// as the runtime does).
  cudaError_t set_peer_access(const cudaMemAccessDesc* descs, std::size_t count) noexcept;
  cudaMemAccessFlags access_of(int device) const noexcept;

  /// A chunk touching some range (chunks_touching).
  struct ChunkInfo {
    std::size_t first_granule = 0;
    std::size_t granules = 0;
    PhysicalHandle handle = 0;
    std::uint64_t serial = 0;  ///< never reused in this arena
  };
  /// Appends every chunk backing a granule that [offset, offset + bytes)
  /// overlaps, in address order; false (nothing appended) if one is unbacked.
  bool chunks_touching(std::size_t offset, std::size_t bytes, std::vector<ChunkInfo>& out) const;
  const PhysicalProps& props() const noexcept { return props_; }

  std::size_t backed_bytes() const noexcept { return backed_bytes_; }
  std::size_t backed_high() const noexcept { return backed_high_; }
  void reset_backed_high() noexcept { backed_high_ = backed_bytes_; }
  /// The most ever backed at once, growths undone since included; unlike
  /// backed_high (reservedHigh), never reset: pin-ahead's hold after a
  /// release lasts until the pool backs more than this (sleep_pin_ahead.hpp).
  std::size_t backed_peak() const noexcept { return backed_peak_; }
  std::size_t max_physical() const noexcept { return max_physical_; }
  std::uint64_t chunks_mapped() const noexcept { return chunks_mapped_; }
  std::uint64_t chunks_unmapped() const noexcept { return chunks_unmapped_; }
  std::uint64_t chunks_moved() const noexcept { return chunks_moved_; }
  std::uint64_t bytes_moved() const noexcept { return bytes_moved_; }
  /// Moves that went back to a ghost (no driver call).
  std::uint64_t ghost_moves() const noexcept { return ghost_moves_; }
  std::size_t live_ghosts() const noexcept { return ghosts_.live(); }
  std::size_t live_chunks() const noexcept { return chunks_.size() - free_chunk_slots_.size(); }

  // ---- sleep and wake (arena_sleep.cpp) ---------------------------------------
  /// Where a chunk lay when sleep gave its memory back: wake makes a chunk of
  /// the same size there, so every address means what it meant.
  struct Extent {
    std::size_t first_granule = 0;
    std::size_t granules = 0;
  };
  /// Unmaps and releases every chunk (its ghosts first), appending where each
  /// lay to `released`. Stops at the first chunk whose ghost or mapping
  /// cannot go (cudaErrorNotReady for a ghost's pin not settled, else the
  /// driver's error): the chunks released before it are in `released`, it
  /// and the rest stay as they were. The caller guarantees no work touches
  /// any chunk. Throws std::bad_alloc (nothing released) when `released`
  /// cannot grow.
  cudaError_t unback_all(std::vector<Extent>& released);
  /// Physical memory for `extents` (all unbacked now): every chunk created
  /// first, then mapped, then made accessible to the owner and the peers
  /// set_peer_access granted, the handles in `handles` (cleared first, same
  /// order). Not counted as the arena's until rebacked(). On failure all it
  /// made is gone and the driver's error is returned. Throws std::bad_alloc
  /// before any driver call.
  cudaError_t reback(const std::vector<Extent>& extents, std::vector<PhysicalHandle>& handles);
  /// Unmaps and releases what reback made (no work may touch it any more).
  void unreback(const std::vector<Extent>& extents, const std::vector<PhysicalHandle>& handles) noexcept;
  /// Makes what reback made the arena's chunks. Throws std::bad_alloc before
  /// changing anything.
  void rebacked(const std::vector<Extent>& extents, const std::vector<PhysicalHandle>& handles);

 private:
  static constexpr std::int32_t kUnbacked = -1;
  struct Chunk {
    std::size_t first_granule = 0;
    std::size_t granules = 0;  // 0 = slot unused
    PhysicalHandle handle = 0;
    std::uint64_t serial = 0;
    /// Its mapping has its access (set_access done): a mapping made without
    /// has none until grant_access covers it, and a ghost left by it none.
    bool accessible = false;
  };

  cudaError_t create_chunk(std::size_t first_granule, std::size_t granules, std::int32_t* slot) noexcept;
  /// The most granules a new chunk may have under `chunk_limit` (bytes; 0:
  /// max_chunk alone); 0 = no limit.
  std::size_t chunk_granules(std::size_t chunk_limit) const noexcept;
  /// False (nothing released; the chunk stays, backed and counted) when one
  /// of its ghosts cannot go (a pin not settled, an unmap that fails) or its
  /// own unmap fails.
  bool destroy_chunk(std::int32_t slot) noexcept;
  /// Maps `chunk`'s handle at its first_granule; with `with_access`, sets
  /// access too (undoing the map if that fails).
  cudaError_t map_chunk(const Chunk& chunk, bool with_access) noexcept;
  void mark(std::size_t first_granule, std::size_t granules, std::int32_t slot) noexcept;
  /// How many granules in [first, end) are backed, a word at a time.
  std::size_t backed_granules(std::size_t first, std::size_t end) const noexcept;
  /// The first backed granule in [from, end), or end.
  std::size_t next_backed(std::size_t from, std::size_t end) const noexcept;
  /// The first unbacked granule in [from, end), or end.
  std::size_t next_unbacked(std::size_t from, std::size_t end) const noexcept;
  std::vector<cudaMemAccessDesc> access_descs() const;
  /// The owner's and the peers' access over mapped granules (one driver
  /// call); grant_access also marks the chunks there accessible.
  cudaError_t set_access_over(std::size_t first_granule, std::size_t granules) noexcept;

  Driver& driver_;
  int device_;
  std::size_t granularity_;
  std::uintptr_t base_ = 0;
  std::size_t size_ = 0;
  std::size_t max_physical_;
  std::size_t max_chunk_granules_;              ///< 0 = a whole run in one chunk
  std::vector<std::int32_t> chunk_of_granule_;  // kUnbacked or index into chunks_
  std::vector<std::uint64_t> backed_bits_;      // bit g set: granule g backed (for skipping)
  std::vector<std::uint64_t> backed_words_;     // bit w set: backed_bits_[w] != 0 (for skipping further)
  std::vector<Chunk> chunks_;
  std::vector<std::int32_t> free_chunk_slots_;
  GhostMappings ghosts_;                  ///< the old places of moved chunks, still mapped
  std::vector<cudaMemAccessDesc> peers_;  // devices other than the owner
  std::size_t backed_bytes_ = 0;
  bool abandoned_ = false;  ///< abandon(): nothing is released at destruction
  std::size_t backed_high_ = 0;
  std::size_t backed_peak_ = 0;  ///< >= backed_high_; never lowered
  std::uint64_t chunks_mapped_ = 0;
  std::uint64_t chunks_unmapped_ = 0;
  std::uint64_t chunks_moved_ = 0;
  std::uint64_t bytes_moved_ = 0;
  std::uint64_t ghost_moves_ = 0;
  PhysicalProps props_;
  std::uint64_t next_serial_ = 1;
};

}  // namespace sova::detail
