// The built-in placement policies and the pool's Placement dispatcher.
#include "core/placement.hpp"

#include <algorithm>
#include <string>

namespace sova {

namespace {

using detail::place_at_start;
using detail::place_in_one_granule;
using detail::place_size_aligned;

class BestFitPolicy final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "best_fit"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return detail::round_exact(bytes); }
  std::size_t place(FreeRange range, std::size_t size, std::size_t) const noexcept override {
    return place_at_start(range, size);
  }
};

class SizeClassPolicy final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "size_classes"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return detail::round_to_class(bytes); }
  std::size_t backing(std::size_t bytes, std::size_t) const noexcept override { return bytes; }
  std::size_t place(FreeRange range, std::size_t size, std::size_t granularity) const noexcept override {
    return place_in_one_granule(range, size, granularity);
  }
};

class BuddyPolicy final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "buddy"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return detail::round_to_power_of_two(bytes); }
  std::size_t backing(std::size_t bytes, std::size_t) const noexcept override { return bytes; }
  std::size_t place(FreeRange range, std::size_t size, std::size_t) const noexcept override {
    return place_size_aligned(range, size);
  }
};

class DefaultPolicy final : public PlacementPolicy {
 public:
  const char* name() const noexcept override { return "default"; }
  std::size_t block_size(std::size_t bytes) const noexcept override { return detail::round_default(bytes); }
  std::size_t place(FreeRange range, std::size_t size, std::size_t granularity) const noexcept override {
    return size <= kSmallBlockLimit ? place_in_one_granule(range, size, granularity) : place_at_start(range, size);
  }
};

}  // namespace

std::shared_ptr<const PlacementPolicy> best_fit_policy() {
  static const auto policy = std::make_shared<const BestFitPolicy>();
  return policy;
}
std::shared_ptr<const PlacementPolicy> size_class_policy() {
  static const auto policy = std::make_shared<const SizeClassPolicy>();
  return policy;
}
std::shared_ptr<const PlacementPolicy> buddy_policy() {
  static const auto policy = std::make_shared<const BuddyPolicy>();
  return policy;
}
std::shared_ptr<const PlacementPolicy> default_placement_policy() {
  static const auto policy = std::make_shared<const DefaultPolicy>();
  return policy;
}

}  // namespace sova

namespace sova::detail {

Placement::Placement(const PoolOptions& options, std::size_t upper_half) : small_region_start_(upper_half) {
  switch (options.policy) {
    case Policy::default_policy:
      policy_ = default_placement_policy();
      rounding_ = Rounding::default_classes;
      where_ = Where::segregated;
      return;
    case Policy::best_fit: policy_ = best_fit_policy(); return;
    case Policy::size_classes:
      policy_ = size_class_policy();
      rounding_ = Rounding::classes;
      where_ = Where::one_granule;
      backs_whole_block_ = false;
      backs_request_ = true;
      return;
    case Policy::buddy:
      policy_ = buddy_policy();
      rounding_ = Rounding::power_of_two;
      where_ = Where::size_aligned;
      backs_whole_block_ = false;
      backs_request_ = true;
      return;
    case Policy::custom:
      if (options.placement == nullptr) {
        throw Error("sova: Policy::custom needs PoolOptions::placement", cudaErrorInvalidValue);
      }
      policy_ = options.placement;
      rounding_ = Rounding::custom;
      where_ = Where::custom;
      backs_whole_block_ = false;
      return;
  }
  throw Error("sova: unknown placement policy " + std::to_string(static_cast<int>(options.policy)),
              cudaErrorInvalidValue);
}

std::size_t Placement::place(FreeRange range, std::size_t size, std::size_t granularity, bool relaxed) const noexcept {
  switch (where_) {
    case Where::start: return place_at_start(range, size);
    case Where::segregated: {
      const bool small = size <= kSmallBlockLimit;
      if (!relaxed) {
        if (small) {
          // Only the part of the range in the upper half.
          const std::size_t end = range.offset + range.size;
          if (end <= small_region_start_) return PlacementPolicy::kNoFit;
          const std::size_t from = std::max(range.offset, small_region_start_);
          return place_in_one_granule(FreeRange{from, end - from}, size, granularity);
        }
        const std::size_t at = place_at_start(range, size);
        return at != PlacementPolicy::kNoFit && at + size <= small_region_start_ ? at : PlacementPolicy::kNoFit;
      }
      return small ? place_in_one_granule(range, size, granularity) : place_at_start(range, size);
    }
    case Where::one_granule: return place_in_one_granule(range, size, granularity);
    case Where::size_aligned: return place_size_aligned(range, size);
    case Where::custom: break;
  }
  if (size > range.size) return PlacementPolicy::kNoFit;
  const std::size_t at = policy_->place(range, size, granularity);
  const bool inside = at != PlacementPolicy::kNoFit && at % kAlignment == 0 && at >= range.offset &&
                      at - range.offset <= range.size - size;
  return inside ? at : PlacementPolicy::kNoFit;
}

}  // namespace sova::detail
