// Placement: the pool's view of its placement policy (include/sova/placement.hpp).
//
// The built-in policies' arithmetic lives here as inline functions, so that
// the fast path rounds a request without a virtual call; the policy objects
// that users can name (placement_builtin.cpp) call the same functions. A
// user's policy goes through its virtual methods, whose answers are checked
// here: a broken answer fails the allocation (cudaErrorInvalidValue), it
// never reaches the heap.
#pragma once

#include "core/block.hpp"

#include <sova/error.hpp>
#include <sova/options.hpp>
#include <sova/placement.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <memory>

namespace sova::detail {

static_assert(kAlignment == kPlacementAlignment);

/// Exact: the request rounded up to 512.
inline std::size_t round_exact(std::size_t bytes) noexcept { return round_up_to_alignment(bytes); }

/// Four classes per power of two: 512, 1024, 1536, 2048, then steps of a
/// quarter of the power of two below (2560, 3072, 3584, 4096, 5120, ...).
inline std::size_t round_to_class(std::size_t bytes) noexcept {
  const std::size_t size = round_up_to_alignment(bytes);
  if (size <= 4 * kAlignment) return size;
  const std::size_t step = std::bit_floor(size - 1) / 4;
  return (size + step - 1) / step * step;
}

/// The default policy's: size classes up to kSmallClassLimit, exact above.
/// Exact sizes made a stream that cycles through many nearby small sizes
/// miss its cache on most allocations: threads_mixed's 64 sizes of 256 B +
/// k x 4 KiB fall into 25 classes, and on the simulation
/// (bench/sim_mixed.cpp) one stream missed 80% of them exactly and 24% by
/// class, 16 streams 75% and 11%, with less memory reserved. The recorded
/// traces' memory and fast-path hits are unchanged (docs/policies.md).
/// Above the limit exact sizes stay: rounding large blocks costs memory.
inline std::size_t round_default(std::size_t bytes) noexcept {
  return bytes <= kSmallClassLimit ? round_to_class(bytes) : round_exact(bytes);
}

/// The power of two at or above the request, at least 512.
inline std::size_t round_to_power_of_two(std::size_t bytes) noexcept {
  return bytes <= kAlignment ? kAlignment : std::bit_ceil(bytes);
}

/// At the range's start.
inline std::size_t place_at_start(FreeRange range, std::size_t size) noexcept {
  return size <= range.size ? range.offset : PlacementPolicy::kNoFit;
}

/// Slab-style: a block no larger than a granule may not cross a granule
/// boundary; it goes at the range's start, or else at the first boundary.
inline std::size_t place_in_one_granule(FreeRange range, std::size_t size, std::size_t granularity) noexcept {
  if (size > range.size) return PlacementPolicy::kNoFit;
  if (size > granularity) return range.offset;
  std::size_t start = range.offset;
  if (start / granularity != (start + size - 1) / granularity) {
    start = (start / granularity + 1) * granularity;
  }
  return start + size <= range.offset + range.size ? start : PlacementPolicy::kNoFit;
}

/// At the first offset in the range aligned to the block's own size (buddy positions).
inline std::size_t place_size_aligned(FreeRange range, std::size_t size) noexcept {
  const std::size_t start = (range.offset + size - 1) / size * size;
  return start >= range.offset && start + size <= range.offset + range.size ? start : PlacementPolicy::kNoFit;
}

class Placement {
 public:
  /// Throws sova::Error (cudaErrorInvalidValue) for Policy::custom without a
  /// policy object, or a policy value that is none of the enum's.
  /// `upper_half`: the offset (granule-aligned) where the upper half of the
  /// pool's VA begins, which the default policy keeps for small blocks.
  Placement(const PoolOptions& options, std::size_t upper_half);

  /// The block size for `bytes` (0 < bytes); 0 when a user's policy answered
  /// something that breaks its contract.
  std::size_t block_size(std::size_t bytes) const noexcept {
    switch (rounding_) {
      case Rounding::exact: return round_exact(bytes);
      case Rounding::default_classes: return round_default(bytes);
      case Rounding::classes: return round_to_class(bytes);
      case Rounding::power_of_two: return round_to_power_of_two(bytes);
      case Rounding::custom: break;
    }
    const std::size_t size = policy_->block_size(bytes);
    return size >= bytes && size % kAlignment == 0 ? size : 0;
  }

  /// Bytes from a block's start that must be backed: within [round512(bytes), size].
  std::size_t backing(std::size_t bytes, std::size_t size) const noexcept {
    if (backs_whole_block_) return size;
    const std::size_t need = backs_request_ ? bytes : policy_->backing(bytes, size);
    // Clamped before rounding: a user's answer near SIZE_MAX would wrap to 0
    // when rounded up. `size` is a multiple of 512 and at least
    // `bytes`, so the rounded value stays within it.
    return round_up_to_alignment(std::clamp(need, bytes, size));
  }

  /// Where in `range` a block of `size` goes, or PlacementPolicy::kNoFit
  /// (also for a user's answer outside the range or off the alignment).
  /// The default policy segregates: small blocks (<= kSmallBlockLimit) in the
  /// upper half of the VA, larger ones in the lower half, so that long-lived
  /// small blocks do not pin the chunks of large ones (which then cannot be
  /// remapped or released). `relaxed` lifts that rule: the pool asks again
  /// relaxed when no candidate fits strictly, so segregation never causes a
  /// failure by itself.
  std::size_t place(FreeRange range, std::size_t size, std::size_t granularity, bool relaxed = false) const noexcept;
  /// Whether place() distinguishes strict and relaxed (the default policy).
  bool segregates() const noexcept { return where_ == Where::segregated; }
  /// Where the regions meet, or 0 when the policy has one region.
  std::size_t region_boundary() const noexcept { return segregates() ? small_region_start_ : 0; }

  const char* name() const noexcept { return policy_->name(); }
  const PlacementPolicy& policy() const noexcept { return *policy_; }

 private:
  enum class Rounding { exact, default_classes, classes, power_of_two, custom };
  enum class Where { start, segregated, one_granule, size_aligned, custom };
  Rounding rounding_ = Rounding::exact;
  Where where_ = Where::start;
  bool backs_whole_block_ = true;
  bool backs_request_ = false;
  std::shared_ptr<const PlacementPolicy> policy_;
  std::size_t small_region_start_ = 0;  ///< segregated: where small blocks begin
};

}  // namespace sova::detail
