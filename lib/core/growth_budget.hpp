// GrowthBudget: when the pool may grow with new physical memory, how much
// remapping may cost, and how much of a stream's cache a miss keeps.
//
// Pure logic: every rule reads only the figures it is given (the live peak,
// the active streams, what is backed) and the remapping credit this object
// holds. No driver, no lock of its own: the pool calls the credit's members
// under its heap lock; the rest are static and thread-safe. The figures
// behind each constant are in docs/design.md, section "Tuning constants".
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace sova::detail {

/// Remapping one block moves at most this many chunks per chunk that creating
/// its missing granules would take ... (docs/design.md, "Tuning constants")
inline constexpr std::size_t kRemapMovesPerCreate = 2;
/// ... plus this many.
inline constexpr std::size_t kRemapMovesExtra = 2;

/// The remapping credit is counted in 1/kRemapCreditScale units of driver work.
inline constexpr std::uint64_t kRemapCreditScale = 16;
/// Credit a balanced miss earns for a size its stream freed before (scaled).
inline constexpr std::uint64_t kRemapCreditRecurringMiss = 8;
/// Credit a balanced miss earns for a size never freed on its stream (scaled).
inline constexpr std::uint64_t kRemapCreditNewSizeMiss = 1;
/// Credit every miss earns under RemapEffort::thorough (scaled).
inline constexpr std::uint64_t kRemapCreditPerMissThorough = 32;
/// The most credit banked, in units (a new pool starts with it full).
inline constexpr std::uint64_t kRemapCreditUnits = 1024;

/// RemapEffort::thorough backs a block with chunks of at least this size ...
inline constexpr std::size_t kThoroughMinChunk = std::size_t{8} << 20;
/// ... at most this size ...
inline constexpr std::size_t kThoroughMaxChunk = std::size_t{16} << 20;
/// ... and otherwise 1/kThoroughChunksPerBlock of the block, rounded down to a power of two.
inline constexpr std::size_t kThoroughChunksPerBlock = 16;

/// A miss keeps a stream's cached small blocks of recurring sizes up to this many bytes.
inline constexpr std::size_t kKeptSmallCacheBytes = std::size_t{4} << 20;
/// ... or this many, for a serving cache while several streams are active.
inline constexpr std::size_t kServingKeptCacheBytes = std::size_t{8} << 20;
/// A cache "serves" when it serves at least one allocation in this many.
inline constexpr std::uint64_t kKeptReuseShare = 8;

/// Reserved memory may grow up to the live peak plus 1/kGrowthSlackDivisor of it.
inline constexpr std::uint64_t kGrowthSlackDivisor = 64;
/// The slack's per-stream floor counts at most this many streams.
inline constexpr std::uint64_t kSlackStreams = 16;
/// The slow path waits before it grows when free memory exceeds what is used by this much at least.
inline constexpr std::uint64_t kFreeSlack = std::uint64_t{64} << 20;

class GrowthBudget {
 public:
  explicit GrowthBudget(bool thorough) noexcept : thorough_(thorough) {}

  // ---- memory rules: static, pure ------------------------------------------

  /// What a serving cache may keep of small blocks whatever the live peak, and
  /// the growth slack per stream: kServingKeptCacheBytes where several streams
  /// are active (their misses queue for the heap), else kKeptSmallCacheBytes.
  static std::size_t kept_small_floor(std::size_t active_streams) noexcept {
    return active_streams > 1 ? kServingKeptCacheBytes : kKeptSmallCacheBytes;
  }

  /// The slack over a live peak of `live_peak` bytes: 1/kGrowthSlackDivisor of
  /// it, or kept_small_floor() per active stream (at most kSlackStreams, at
  /// least one) where that is more: a small pool shared by streams must be
  /// able to hold their kept blocks without flushing them on every miss.
  static std::uint64_t slack(std::uint64_t live_peak, std::size_t active_streams) noexcept {
    const std::uint64_t streams = std::clamp<std::uint64_t>(active_streams, 1, kSlackStreams);
    return std::max<std::uint64_t>(live_peak / kGrowthSlackDivisor, streams * kept_small_floor(active_streams));
  }

  /// Whether backing `missing` more bytes keeps reserved memory within the
  /// budget: `backed` bytes now, less the `stranded` bytes that quiet or
  /// destroyed streams' caches hold (no active stream can take them until
  /// their frees are known complete), plus `missing`, at most the live peak (the
  /// request included) plus slack() and a granule. Beyond it, free chunks are
  /// remapped first: a move costs about what a create does, so remapping below
  /// the budget would only trade speed for memory within the slack anyway.
  static bool allows(std::uint64_t backed, std::uint64_t stranded, std::uint64_t missing, std::uint64_t live_peak,
                     std::uint64_t granularity, std::size_t active_streams) noexcept {
    const std::uint64_t budget = live_peak + slack(live_peak, active_streams) + granularity;
    return backed - std::min(stranded, backed) + missing <= budget;
  }

  /// Whether reserved memory exceeds what is used by more than what is used
  /// (and by at least kFreeSlack): then the slow path waits before it grows.
  static bool holds_too_much_free(std::uint64_t reserved, std::uint64_t used) noexcept {
    return reserved > used + std::max(used, kFreeSlack);
  }

  /// Whether a stream's cache serves at least one allocation in
  /// kKeptReuseShare (`hits` of `allocations`): its newest blocks come back.
  static bool cache_serves(std::uint64_t hits, std::uint64_t allocations) noexcept {
    return hits * kKeptReuseShare >= allocations;
  }

  /// Whether a miss keeps the stream's kept blocks where it can: with other
  /// streams active, or in a small pool (a live peak whose
  /// 1/kGrowthSlackDivisor is under kKeptSmallCacheBytes) whose stream's cache
  /// serves. Then a fit that needs new memory within the budget grows instead
  /// of flushing them, and a cache over its bound gives back its least
  /// recently freed blocks, not all of them. Otherwise a stream alone flushes
  /// them whole.
  static bool keeps_small_caches(std::size_t active_streams, std::uint64_t used_high, bool serves) noexcept {
    if (active_streams > 1) return true;
    return used_high / kGrowthSlackDivisor < kKeptSmallCacheBytes && serves;
  }

  /// How many bytes of kept blocks a miss leaves cached: kKeptSmallCacheBytes;
  /// or, for a serving cache, kept_small_floor() or 1/kGrowthSlackDivisor of
  /// the live peak, whichever is more.
  static std::size_t kept_cache_bound(bool serves, std::size_t active_streams, std::uint64_t used_high) noexcept {
    if (!serves) return kKeptSmallCacheBytes;
    return std::max<std::size_t>(kept_small_floor(active_streams), used_high / kGrowthSlackDivisor);
  }

  /// The most moves remapping may make for a block whose missing granules
  /// would take `chunks_to_create` new chunks.
  static std::size_t max_moves(std::size_t chunks_to_create) noexcept {
    return kRemapMovesPerCreate * chunks_to_create + kRemapMovesExtra;
  }

  // ---- chunk size --------------------------------------------------------------

  bool thorough() const noexcept { return thorough_; }
  /// The chunk limit for backing `need` bytes of one block (Arena::commit):
  /// 0 (the arena's max_chunk) unless remapping is thorough; then a
  /// 1/kThoroughChunksPerBlock share of it, a power of two within
  /// [kThoroughMinChunk, kThoroughMaxChunk].
  std::size_t chunk_limit_for(std::size_t need) const noexcept {
    if (!thorough_) return 0;
    const std::size_t share = std::bit_floor(std::max<std::size_t>(need / kThoroughChunksPerBlock, 1));
    return std::clamp(share, kThoroughMinChunk, kThoroughMaxChunk);
  }

  // ---- the remapping credit (the caller's lock) ------------------------------------

  /// Whole units of remapping work left (a chunk moved, a stream waited for,
  /// a chunk released for a gap: one unit each).
  std::size_t units_left() const noexcept { return static_cast<std::size_t>(credit_ / kRemapCreditScale); }
  /// A slow-path allocation earns credit; `recurring_size`: its stream has
  /// freed a block of this size before.
  void earn(bool recurring_size) noexcept {
    const std::uint64_t earned = thorough_        ? kRemapCreditPerMissThorough
                                 : recurring_size ? kRemapCreditRecurringMiss
                                                  : kRemapCreditNewSizeMiss;
    credit_ = std::min(credit_ + earned, kRemapCreditUnits * kRemapCreditScale);
  }
  /// Pays for `units` of work, down to nothing at most.
  void spend(std::size_t units) noexcept {
    const std::uint64_t cost = std::uint64_t{units} * kRemapCreditScale;
    credit_ = cost < credit_ ? credit_ - cost : 0;
  }

 private:
  bool thorough_;
  std::uint64_t credit_ = kRemapCreditUnits * kRemapCreditScale;
};

}  // namespace sova::detail
