// A long kernel that keeps writing its buffer: each round steps every word
// through an LCG, then the threads spin for a while; the final contents are
// known on the host exactly (lcg_expected), however the kernel was timed.
// Used to show that other streams' work is undisturbed by a pool's sleep.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sova::gputest {

/// Enqueues the kernel on `stream`: `rounds` rounds over data[0, words),
/// each followed by about `ns_per_round` ns of spinning. Returns the launch's error.
cudaError_t launch_lcg_rounds(std::uint32_t* data, std::size_t words, unsigned rounds, unsigned long long ns_per_round,
                              cudaStream_t stream);

/// What a word holding `initial` holds after `rounds` rounds.
inline std::uint32_t lcg_expected(std::uint32_t initial, unsigned rounds) {
  for (unsigned r = 0; r < rounds; ++r) initial = initial * 1664525u + 1013904223u;
  return initial;
}

}  // namespace sova::gputest
