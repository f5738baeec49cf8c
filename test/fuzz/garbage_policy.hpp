// A placement policy that answers garbage: for each call, a hash of its
// arguments and the policy's seed picks a valid answer or one that breaks
// the contract in some way (short or misaligned block sizes, SIZE_MAX,
// backing outside [request, size], placements outside the range or off the
// alignment). Deterministic in its arguments, as the contract asks, so the
// pool can be held to its promise: broken answers fail the allocation and
// change nothing; valid ones work (include/sova/placement.hpp).
#pragma once

#include <sova/placement.hpp>

#include <cstddef>
#include <cstdint>

namespace sova::fuzz {

class GarbagePolicy final : public PlacementPolicy {
 public:
  explicit GarbagePolicy(std::uint64_t seed) : seed_(seed) {}
  const char* name() const noexcept override { return "fuzz_garbage"; }

  std::size_t block_size(std::size_t bytes) const noexcept override {
    const std::size_t exact = bytes > SIZE_MAX - 511 ? SIZE_MAX : (bytes + 511) / 512 * 512;
    switch (mix(bytes, 1) % 8) {
      case 0: return bytes / 2;                                                       // short
      case 1: return SIZE_MAX;                                                        // huge, misaligned
      case 2: return bytes + 1;                                                       // misaligned
      case 3: return exact > SIZE_MAX - 4096 ? exact : (exact + 4095) / 4096 * 4096;  // rounded up
      case 4: return exact > SIZE_MAX / 2 ? exact : exact + (std::size_t{1} << (mix(bytes, 2) % 40)) / 512 * 512;
      default: return exact;
    }
  }

  std::size_t backing(std::size_t bytes, std::size_t size) const noexcept override {
    switch (mix(bytes ^ size, 3) % 7) {
      case 0: return 0;
      case 1: return SIZE_MAX;
      case 2: return SIZE_MAX - 100;
      case 3: return size + 1;
      case 4: return bytes;
      case 5: return static_cast<std::size_t>(mix(size, 4));
      default: return size;
    }
  }

  std::size_t place(FreeRange range, std::size_t size, std::size_t granularity) const noexcept override {
    const std::uint64_t h = mix(range.offset ^ (range.size * 31) ^ size, 5);
    switch (h % 8) {
      case 0: return kNoFit;
      case 1: return range.offset + range.size;  // past the range
      case 2: return range.offset + 1;           // misaligned
      case 3: return range.offset - 512;         // before it (wraps at 0)
      case 4:                                    // top-down
        return size <= range.size ? (range.offset + range.size - size) / 512 * 512 : kNoFit;
      case 5: {  // somewhere inside, aligned
        if (size > range.size) return kNoFit;
        const std::size_t slack = (range.size - size) / 512;
        return range.offset + (slack == 0 ? 0 : (h >> 8) % (slack + 1)) * 512;
      }
      case 6:  // at a granule boundary
        return (range.offset + granularity - 1) / granularity * granularity;
      default: return size <= range.size ? range.offset : kNoFit;
    }
  }

 private:
  std::uint64_t mix(std::uint64_t v, std::uint64_t salt) const noexcept {
    std::uint64_t h = v ^ (seed_ * 0x9E3779B97F4A7C15ull) ^ (salt << 56);
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
  }
  std::uint64_t seed_;
};

}  // namespace sova::fuzz
