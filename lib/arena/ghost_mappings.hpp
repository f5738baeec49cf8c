// GhostMappings: the old places of moved chunks, kept mapped ("ghosts"), so
// that a chunk moved back to one costs no driver call (docs/design.md,
// "Ghost mappings"), and never unmapped while work may still use them
// ("Pinned ghosts").
//
// It owns the ghost records, which granules each one covers, each chunk's
// ghosts (at most kPerChunk, oldest first) and the settler that says when a
// pinned ghost's work is done. It knows chunks only by their slot in the
// Arena and their size in granules; the Arena tells it what moves. Not
// thread-safe: the Arena's caller serializes every call (the pool's heap lock).
#pragma once

#include <sova/driver.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace sova::detail {

class GhostMappings {
 public:
  /// Work that may still use a place a chunk leaves: its frees there, not yet
  /// known complete, all of one stream (the pool's stream state: opaque
  /// here) up to `epoch`. A move whose old place has such frees is safe for
  /// the physical memory (the new block belongs to that same stream, whose
  /// work runs in order) but not for the old VA, which must stay mapped
  /// until that work is done: a pinned ghost.
  struct Pin {
    const void* owner = nullptr;  ///< nullptr: nothing pending there
    std::uint64_t epoch = 0;
  };
  /// Called before a pinned ghost is unmapped: true once the pin's work is
  /// complete (it may wait for it), false when that cannot be made sure; the
  /// ghost then stays, and what needed it gone fails.
  using Settler = bool (*)(void* context, const Pin& pin) noexcept;

  static constexpr std::int32_t kNone = -1;
  static constexpr std::size_t kPerChunk = 2;
  /// No ghost where one was looked for.
  static constexpr std::size_t kNotFound = ~std::size_t{0};

  explicit GhostMappings(Driver& driver) noexcept : driver_(driver) {}
  /// Covers the Arena's VA, reserved at `base`: `granules` of `granularity`
  /// bytes. Throws std::bad_alloc.
  void cover(std::uintptr_t base, std::size_t granularity, std::size_t granules) {
    base_ = base;
    granularity_ = granularity;
    of_granule_.assign(granules, kNone);
  }

  void set_settler(Settler settler, void* context) noexcept {
    settler_ = settler;
    settler_context_ = context;
  }

  /// Where chunk `slot` (of `granules` granules) has an accessible ghost
  /// lying wholly inside [first, first + count) and for which
  /// `unbacked(at, granules)` holds; kNotFound if none.
  template <class Unbacked>
  std::size_t find_within(std::int32_t slot, std::size_t granules, std::size_t first, std::size_t count,
                          Unbacked&& unbacked) const noexcept {
    for (const std::int32_t index : of(slot)) {
      if (index == kNone) break;
      const std::size_t at = records_[index].first_granule;
      if (records_[index].accessible && at >= first && at + granules <= first + count && unbacked(at, granules)) {
        return at;
      }
    }
    return kNotFound;
  }

  /// A move of chunk `slot` from `from` back to `to` where it has an
  /// accessible ghost: the ghost record now stands for `from` (accessible as
  /// the chunk was there: `accessible_from`), pinned by `leaving`, and is the
  /// chunk's newest. False (nothing changed) when no such ghost is at `to`.
  bool move_back(std::int32_t slot, std::size_t granules, std::size_t from, std::size_t to, bool accessible_from,
                 const Pin& leaving) noexcept;
  /// Before chunk `slot` moves anew: drops its oldest ghost if it has
  /// kPerChunk already; false when that ghost stays (see drop).
  bool make_room(std::int32_t slot) noexcept;
  /// A record for a ghost of chunk `slot`, or kNone without host memory for one.
  std::int32_t acquire(std::int32_t slot) noexcept;
  /// Gives back a record acquire returned and keep never used.
  void give_back(std::int32_t index) noexcept { free_records_.push_back(index); }  // capacity reserved: no throw
  /// Makes record `index` chunk `slot`'s newest ghost, at [first, first + granules).
  void keep(std::int32_t index, std::int32_t slot, std::size_t granules, std::size_t first, bool accessible,
            const Pin& pin) noexcept;
  /// Unmaps every ghost overlapping granules [first, first + granules);
  /// false when one of them stays (its pin could not be settled, or its
  /// unmap failed).
  bool drop_in(std::size_t first, std::size_t granules) noexcept;
  /// Unmaps chunk `slot`'s ghosts (before the chunk is released); false when one stays.
  bool drop_of(std::int32_t slot) noexcept;
  /// Unmaps every ghost; false when one stays.
  bool drop_all() noexcept;

  std::size_t live() const noexcept { return records_.size() - free_records_.size(); }

 private:
  struct Record {
    std::int32_t slot = kNone;  // the chunk; kNone: record unused
    std::size_t first_granule = 0;
    std::size_t granules = 0;
    bool accessible = false;  // a move back needs no access call (else: not used)
    Pin pin;                  // work that may still use it (owner nullptr: none)
  };
  using List = std::array<std::int32_t, kPerChunk>;
  static constexpr List kEmpty = {kNone, kNone};

  const List& of(std::int32_t slot) const noexcept {
    return static_cast<std::size_t>(slot) < of_chunk_.size() ? of_chunk_[static_cast<std::size_t>(slot)] : kEmpty;
  }
  void mark(std::size_t first, std::size_t granules, std::int32_t index) noexcept;
  /// Unmaps ghost `index` and forgets it, after its pin is settled; false
  /// (the ghost stays, still mapped and known) when the pin cannot be
  /// settled or the unmap fails.
  bool drop(std::int32_t index) noexcept;

  Driver& driver_;
  std::uintptr_t base_ = 0;
  std::size_t granularity_ = 0;
  std::vector<std::int32_t> of_granule_;  // kNone or index into records_
  std::vector<Record> records_;
  std::vector<std::int32_t> free_records_;
  std::vector<List> of_chunk_;  // by chunk slot: its ghosts, oldest first, kNone past the last
  Settler settler_ = nullptr;   ///< nullptr: pins are not checked (no pool, or its end)
  void* settler_context_ = nullptr;
};

}  // namespace sova::detail
