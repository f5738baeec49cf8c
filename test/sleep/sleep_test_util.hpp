// Helpers for the sleep and wake tests: blocks filled with a pattern of
// their own, and checked byte for byte.
#pragma once

#include "support/catch.hpp"

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace sova::sleep_test {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

/// Polls `done` every millisecond for up to 10 s; true once it holds (for
/// what a background thread does: pin-ahead, the release worker).
inline bool eventually(const std::function<bool()>& done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

struct Filled {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint32_t seed = 0;
};

/// Writes a pattern that differs per block and per byte (the sim's device
/// memory is host memory; no stream work touches it meanwhile).
inline void fill(const Filled& f) {
  auto* p = static_cast<std::uint8_t*>(f.ptr);
  for (std::size_t i = 0; i < f.bytes; ++i) p[i] = static_cast<std::uint8_t>((i * 131 + f.seed * 7 + (i >> 9)) & 0xff);
}

/// True when the block holds its pattern exactly.
inline bool intact(const Filled& f) {
  const auto* p = static_cast<const std::uint8_t*>(f.ptr);
  for (std::size_t i = 0; i < f.bytes; ++i) {
    if (p[i] != static_cast<std::uint8_t>((i * 131 + f.seed * 7 + (i >> 9)) & 0xff)) return false;
  }
  return true;
}

/// Blocks of assorted sizes (small, odd, several granules), filled.
inline std::vector<Filled> allocate_filled(Pool& pool, cudaStream_t stream, std::uint32_t seed = 1) {
  const std::size_t sizes[] = {1000, 4 * KiB + 3, 3 * MiB + 17, 512, 9 * MiB, 64 * KiB, 2 * MiB};
  std::vector<Filled> blocks;
  for (std::size_t size : sizes) {
    Filled f{pool.allocate(size, stream), size, seed++};
    fill(f);
    blocks.push_back(f);
  }
  return blocks;
}

inline bool all_intact(const std::vector<Filled>& blocks) {
  for (const Filled& f : blocks) {
    if (!intact(f)) return false;
  }
  return true;
}

inline std::size_t device_free(SimDriver& sim, int device = 0) {
  std::size_t free_bytes = 0, total = 0;
  REQUIRE(sim.memory_info(device, &free_bytes, &total) == cudaSuccess);
  return free_bytes;
}

}  // namespace sova::sleep_test
