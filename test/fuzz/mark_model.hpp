// The fuzz interpreter's model of one pool's high-water marks and of
// pin-ahead's hold (docs/fuzzing.md, "What is checked"; docs/sleep-wake.md,
// "Pinning ahead"; docs/c-api.md, "Pools"). One-thread programs only: the
// interpreter shows it every statistics read that follows a change of the
// pool, and every call that moves a mark.
//
// What the marks must be, from what the interpreter saw:
//  * UsedMemHigh: the peak of used bytes since the pool was made or the mark
//    was reset. Used bytes rise only by allocations, and the interpreter
//    reads the statistics after each, so the peak it saw is the true one:
//    while one host thread made every call of the pool, used_high equals it;
//    after another thread's call (a free during a wake) or graph memory (a
//    graph's release may run on a driver thread), used_high is a lower bound
//    of it (docs/c-api.md): used_current <= used_high <= the peak.
//  * ReservedMemHigh: never below what the pool was seen reserving since the
//    reset, never falling between resets, at most the device's memory, and
//    right after a reset at most what it reserved just before. A growth that
//    failed midway may raise it unseen, so it is not asked to equal a peak.
//  * Pin-ahead's target (sleep_pin_ahead_target): at most the budget
//    (rounded down to whole 2 MiB slabs) and at most the most a successful
//    growth reserved (bounded by ReservedMemHigh read right after each
//    successful allocation); 0 when pin-ahead is off. After
//    release_sleep_host_memory it holds — target 0, nothing pinned ahead —
//    until a growth leaves the pool reserving more than it ever had: while
//    every successful allocation since left ReservedMemHigh at or below what
//    it read before the release, the hold is certain; where it is not known
//    (a mark reset, a growth that may have passed it), the model stops
//    judging the hold until the next release or reservation.
#pragma once

#include "fuzz/interpreter.hpp"

#include <sova/stats.hpp>

#include <algorithm>
#include <cstdint>
#include <string>

namespace sova::fuzz {

class MarkModel {
 public:
  MarkModel() = default;
  /// A new pool: `pin_ahead` and `budget` its options, `device_bytes` its
  /// device's memory (no pool reserves more).
  MarkModel(bool pin_ahead, std::size_t budget, std::size_t device_bytes)
      : pin_ahead_(pin_ahead), budget_(budget), device_bytes_(device_bytes) {}

  /// A call of the pool from another host thread (UsedMemHigh then need not
  /// be exact), or graph memory of this pool.
  void inexact_used() noexcept { used_exact_ = false; }

  /// The statistics after a call that may have changed the pool. Throws
  /// Failure where a mark breaks its promise.
  void observe(const PoolStats& s) {
    used_peak_ = std::max(used_peak_, s.used_current);
    check(s.used_high >= s.used_current, "UsedMemHigh below UsedMemCurrent", s);
    if (used_exact_) {
      check(s.used_high == used_peak_, "UsedMemHigh is not the peak of used bytes (one thread made every call)", s);
    } else {
      check(s.used_high <= used_peak_, "UsedMemHigh above any used bytes the pool had since its reset", s);
    }
    reserved_floor_ = std::max<std::uint64_t>(reserved_floor_, s.reserved_current);
    check(s.reserved_high >= reserved_floor_, "ReservedMemHigh below what the pool reserved since its reset", s);
    check(s.reserved_high >= last_reserved_high_, "ReservedMemHigh fell without a reset", s);
    check(s.reserved_high <= device_bytes_, "ReservedMemHigh beyond the device's memory", s);
    last_reserved_high_ = s.reserved_high;
    check_pin_ahead(s);
  }

  /// After an allocation, with the statistics read right after it.
  void allocated(const PoolStats& s, bool succeeded) {
    if (succeeded) {
      grown_bound_ = std::max<std::uint64_t>(grown_bound_, s.reserved_high);
      if (hold_ == Hold::held && s.reserved_high > held_at_) {
        // This growth may have passed the mark; with no reset ever, the mark
        // read is the pool's own, and what it reserves now passed it for sure.
        hold_ = !reserved_reset_ && s.reserved_current > held_at_ ? Hold::none : Hold::unknown;
      }
    }
    observe(s);
  }

  /// Used bytes reached `used` between two reads (blocks allocated with no
  /// read between, so that no read sampled them).
  void saw_used(std::uint64_t used) noexcept { used_peak_ = std::max(used_peak_, used); }
  /// UsedMemHigh was reset; `after`: the statistics read right after.
  void used_reset(const PoolStats& after) {
    used_peak_ = after.used_current;
    observe(after);
  }
  /// ReservedMemHigh was reset, `before` and `after` read around the call.
  void reserved_reset(const PoolStats& before, const PoolStats& after) {
    reserved_reset_ = true;
    check(after.reserved_high <= before.reserved_current, "ReservedMemHigh after its reset above what was reserved",
          after);
    reserved_floor_ = after.reserved_current;
    last_reserved_high_ = 0;
    observe(after);
  }

  /// release_sleep_host_memory succeeded; `before`: the statistics read just
  /// before it (nothing grew between).
  void released(const PoolStats& before) {
    hold_ = Hold::held;
    held_at_ = before.reserved_high;
  }
  /// reserve_sleep_backup succeeded: a hold is lifted.
  void reserved_host_memory() noexcept { hold_ = Hold::none; }

  bool holding() const noexcept { return hold_ == Hold::held; }

 private:
  enum class Hold { none, held, unknown };

  void check_pin_ahead(const PoolStats& s) const {
    if (!pin_ahead_) {
      check(s.sleep_pin_ahead_target == 0 && s.sleep_pin_ahead_bytes == 0, "pin-ahead works on a pool without it", s);
      return;
    }
    if (budget_ != 0) {
      const std::uint64_t whole_slabs = budget_ / kSlab * kSlab;
      check(s.sleep_pin_ahead_target <= whole_slabs, "pin-ahead's target beyond the budget's whole slabs", s);
    }
    check(s.sleep_pin_ahead_target <= grown_bound_,
          "pin-ahead's target beyond the most a successful growth reserved", s);
    if (hold_ == Hold::held) {
      check(s.sleep_pin_ahead_target == 0 && s.sleep_pin_ahead_bytes == 0,
            "pin-ahead pinned after release_sleep_host_memory before the pool reserved more than it ever had", s);
    }
  }

  void check(bool ok, const char* what, const PoolStats& s) const {
    if (ok) return;
    throw Failure(std::string(what) + " (used " + std::to_string(s.used_current) + ", used_high " +
                  std::to_string(s.used_high) + ", peak seen " + std::to_string(used_peak_) + "; reserved " +
                  std::to_string(s.reserved_current) + ", reserved_high " + std::to_string(s.reserved_high) +
                  ", floor " + std::to_string(reserved_floor_) + "; pin-ahead target " +
                  std::to_string(s.sleep_pin_ahead_target) + ", pinned ahead " +
                  std::to_string(s.sleep_pin_ahead_bytes) + ", held at " + std::to_string(held_at_) +
                  ", grown bound " + std::to_string(grown_bound_) + ")");
  }

  static constexpr std::uint64_t kSlab = std::uint64_t{2} << 20;  ///< slabs are whole multiples of this
  bool pin_ahead_ = false;
  std::size_t budget_ = 0;
  std::uint64_t device_bytes_ = 0;
  bool used_exact_ = true;
  std::uint64_t used_peak_ = 0;
  std::uint64_t reserved_floor_ = 0;
  std::uint64_t last_reserved_high_ = 0;
  bool reserved_reset_ = false;    ///< ReservedMemHigh was reset once: the mark read is below the pool's own
  std::uint64_t grown_bound_ = 0;  ///< >= the most a successful growth reserved
  Hold hold_ = Hold::none;
  std::uint64_t held_at_ = 0;  ///< ReservedMemHigh read before the release that began the hold
};

}  // namespace sova::fuzz
