// random/ — the trace generator (see random_allocs.hpp), shared by sova_bench
// and sova_bench_torch.
#include "random_allocs.hpp"

#include <stdexcept>
#include <utility>

namespace sova_bench {

RandomTrace make_random_trace(std::size_t allocations, std::size_t max_bytes, std::size_t cap_bytes) {
  if (max_bytes == 0 || max_bytes > UINT32_MAX) throw std::invalid_argument("random trace: max size out of range");
  // splitmix64 with a fixed seed: the same trace on every machine.
  std::uint64_t state = 0x0123456789abcdefULL;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  constexpr std::uint64_t kAllocatePercent = 73;  // RMM's allocation_probability

  RandomTrace trace;
  trace.ops.reserve(2 * allocations);
  std::vector<std::pair<std::uint32_t, std::uint32_t>> live;  // (slot, bytes)
  std::vector<std::uint32_t> free_slots;
  std::size_t live_bytes = 0;
  for (std::size_t i = 0; i < 2 * allocations; ++i) {
    const auto bytes = static_cast<std::uint32_t>(1 + next() % max_bytes);
    const bool allocate = live.empty() || (next() % 100 < kAllocatePercent && trace.allocations < allocations &&
                                           live_bytes + bytes < cap_bytes);
    if (allocate) {
      std::uint32_t slot;
      if (free_slots.empty()) {
        slot = static_cast<std::uint32_t>(trace.slots++);
      } else {
        slot = free_slots.back();
        free_slots.pop_back();
      }
      trace.ops.push_back({slot, bytes});
      live.emplace_back(slot, bytes);
      live_bytes += bytes;
      ++trace.allocations;
      if (live_bytes > trace.peak_requested) trace.peak_requested = live_bytes;
    } else {
      const std::size_t index = next() % live.size();
      const auto [slot, freed] = live[index];
      live[index] = live.back();
      live.pop_back();
      trace.ops.push_back({slot, 0});
      free_slots.push_back(slot);
      live_bytes -= freed;
    }
  }
  // The shape ends with every block freed (2N operations, N allocations); a
  // trace cut short by the cap frees what is left, so replays never leak.
  for (const auto& [slot, bytes] : live) trace.ops.push_back({slot, 0});
  return trace;
}

}  // namespace sova_bench
