// sova — placement policies: how a pool carves its VA range into blocks.
//
// A pool keeps every byte of its VA in blocks: live (handed out), cached on a
// stream, or free in its heap (coalesced with free neighbours, kept in
// best-fit order). A placement policy decides three things and nothing else:
//
//   block_size(bytes)   the size of the block a request gets: the unit of
//                       reuse (a stream's cache hands a freed block of exactly
//                       this size to the next request that rounds to it);
//   backing(bytes, size)   how much of that block, from its start, must be
//                       backed by physical memory; the pool rounds it up to
//                       the granule. VA is cheap and physical is not: a policy
//                       that rounds sizes up generously (buddy, size classes)
//                       backs only what the request needs, so its waste is
//                       bounded by the granule, not by its rounding;
//   place(range, size, granularity)   where in one free range a block goes,
//                       or kNoFit to pass over that range.
//
// The pool does the rest, the same for every policy: per-stream caches, the
// stream-ordered reuse rules, splitting the chosen range around the placed
// block and coalescing freed neighbours, growing and releasing physical
// memory, and remapping free physical chunks under new VA (docs/policies.md).
// The pool offers place() the free ranges of at least `size` bytes in
// best-fit order (smallest first, then lowest address), backed or not: up to
// kPlaceCandidates of them, and last the largest free range (the never-used
// tail of the VA). The first placement that fits is the block's, and the pool
// backs what it lacks; so placements depend on the free VA alone and repeat
// when a program repeats its allocations (docs/design.md, "A stable layout").
// Where another stream's pending frees start a range, the pool offers the
// part after them.
//
// Contracts for a policy of your own (test/core/test_custom_policy.cpp has
// an example):
//   * block_size(bytes) >= bytes, a multiple of kPlacementAlignment (512),
//     the same for the same bytes every time;
//   * bytes <= backing(bytes, size) <= size (values outside are clamped);
//   * place() returns an offset that is a multiple of 512 with
//     range.offset <= offset and offset + size <= range.offset + range.size,
//     or kNoFit; it must not depend on anything but its arguments and the
//     policy's own constant state;
//   * every method is noexcept, thread-safe and cheap: block_size runs on
//     every allocation (backing on every one too, for policies that override
//     it), place() under the pool's heap lock.
// The pool checks the answers rather than trust them: a block size below the
// request or off the alignment fails the allocation with
// cudaErrorInvalidValue, changing nothing; a placement outside the offered
// range counts as kNoFit.
#pragma once

#include <sova/export.h>

#include <cstddef>
#include <memory>

namespace sova {

/// Every block starts at and is sized in multiples of this.
inline constexpr std::size_t kPlacementAlignment = 512;

/// How many free ranges the pool offers place() per search (see above).
inline constexpr int kPlaceCandidates = 16;

/// A free range of a pool's VA, as byte offsets from the pool's base.
struct FreeRange {
  std::size_t offset = 0;
  std::size_t size = 0;
};

class SOVA_API PlacementPolicy {
 public:
  static constexpr std::size_t kNoFit = ~std::size_t{0};

  virtual ~PlacementPolicy() = default;
  /// A short name, for statistics and error messages.
  virtual const char* name() const noexcept = 0;
  /// The block size a request of `bytes` (> 0) gets.
  virtual std::size_t block_size(std::size_t bytes) const noexcept = 0;
  /// Bytes from the block's start that must be backed for a request of
  /// `bytes` in a block of `size`. Default: the whole block.
  virtual std::size_t backing(std::size_t bytes, std::size_t size) const noexcept {
    (void)bytes;
    return size;
  }
  /// Where a block of `size` bytes starts within `range`, or kNoFit.
  /// `granularity` is the pool's physical granule (2 MiB on H100).
  virtual std::size_t place(FreeRange range, std::size_t size, std::size_t granularity) const noexcept = 0;
};

/// Blocks of at most this size are "small": the default policy places them
/// like the size-class policy (no block across a granule boundary), and
/// PoolStats::cached_small_bytes counts them.
inline constexpr std::size_t kSmallBlockLimit = std::size_t{1} << 20;

/// Requests of at most this size get a size-class block under the default
/// policy (four classes per power of two, as size_class_policy): a stream
/// that allocates many nearby small sizes then finds a block of the class in
/// its cache where an exact size would miss.
inline constexpr std::size_t kSmallClassLimit = std::size_t{256} << 10;

/// Best fit: exact sizes (rounded to 512), each block at the start of the
/// smallest free range that holds it. Coalescing keeps free space whole.
SOVA_API std::shared_ptr<const PlacementPolicy> best_fit_policy();

/// Size classes: four classes per power of two (512, 1024, 1536, 2048, 2560,
/// 3072, 3584, 4096, 5120, ...: at most 25% over the request, 12% on average)
/// so that freed blocks serve many nearby sizes. Slab-style: a block no larger
/// than a granule never straddles a granule boundary, so small classes fill
/// granules the way slabs do and a granule whose blocks are all free is whole
/// again (releasable, movable). Backing: only the granules the request needs.
SOVA_API std::shared_ptr<const PlacementPolicy> size_class_policy();

/// Buddy: power-of-two blocks (at least 512) at offsets aligned to their size,
/// the binary buddy system's positions; free neighbours coalesce (complete
/// coalescing, of which buddy merging is the special case). Backing: only the
/// granules the request needs, so a 5 MiB request in an 8 MiB block holds
/// 6 MiB of physical memory, not 8.
SOVA_API std::shared_ptr<const PlacementPolicy> buddy_policy();

/// The default: exact sizes above kSmallClassLimit, size classes up to it;
/// small blocks (<= kSmallBlockLimit) placed as the size-class policy places
/// them, larger ones by best fit. A pool made with
/// Policy::default_policy also keeps small blocks in the upper half of its VA
/// and larger ones in the lower half while both have room (it knows its VA;
/// this object, which sees one free range at a time, does not), so that
/// long-lived small blocks do not pin large blocks' physical chunks.
SOVA_API std::shared_ptr<const PlacementPolicy> default_placement_policy();

}  // namespace sova
