// Helpers of the first-sleep scenario tests (test_scenario_first_sleep*.cpp),
// written from docs/sleep-wake.md and the public headers alone: a byte
// pattern that differs at every byte (a block restored at the wrong offset,
// a tail byte lost or two blocks swapped show up), a model of the blocks a
// program holds, and the simulation's figures a test compares. No Catch2
// here: the callers assert.
#pragma once

#include <sova/pool.hpp>
#include <sova/sim.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace sova::first_sleep {

inline constexpr std::size_t kKiB = std::size_t{1} << 10;
inline constexpr std::size_t kMiB = std::size_t{1} << 20;

/// The 8 bytes of `tag`'s pattern at word `j` (a splitmix64 of both).
inline std::uint64_t pattern_word(std::uint32_t tag, std::size_t j) {
  std::uint64_t x = (std::uint64_t{tag} << 32) ^ (static_cast<std::uint64_t>(j) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Writes `tag`'s pattern over every byte of [ptr, ptr + bytes).
inline void write_pattern(void* ptr, std::size_t bytes, std::uint32_t tag) {
  auto* p = static_cast<unsigned char*>(ptr);
  const std::size_t words = bytes / 8;
  for (std::size_t j = 0; j < words; ++j) {
    const std::uint64_t w = pattern_word(tag, j);
    std::memcpy(p + 8 * j, &w, 8);
  }
  const std::uint64_t tail = pattern_word(tag, words);
  std::memcpy(p + 8 * words, &tail, bytes % 8);
}

/// Bytes of [ptr, ptr + bytes) that do not hold `tag`'s pattern.
inline std::size_t wrong_bytes(const void* ptr, std::size_t bytes, std::uint32_t tag) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  std::size_t wrong = 0;
  const std::size_t words = bytes / 8;
  for (std::size_t j = 0; j <= words; ++j) {
    const std::size_t n = j < words ? 8 : bytes % 8;
    if (n == 0) break;
    const std::uint64_t want = pattern_word(tag, j);
    std::uint64_t got = 0;
    std::memcpy(&got, p + 8 * j, n);
    if (n < 8) got |= want & ~((std::uint64_t{1} << (8 * n)) - 1);  // compare the tail's bytes only
    if (got == want) continue;
    for (std::size_t b = 0; b < n; ++b) wrong += ((got >> (8 * b)) & 0xff) != ((want >> (8 * b)) & 0xff);
  }
  return wrong;
}

/// Bytes of [ptr, ptr + bytes) that are not zero.
inline std::size_t nonzero_bytes(const void* ptr, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < bytes; ++i) wrong += p[i] != 0;
  return wrong;
}

/// A block the program holds, and what its bytes must be.
struct Block {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint32_t tag = 0;
  enum class Expect { pattern, zero, undefined } expect = Expect::pattern;
};

/// Bytes of the live blocks that are not what the model says (host reads:
/// the writers' streams synchronized first).
inline std::size_t wrong_in(const std::vector<Block>& blocks) {
  std::size_t wrong = 0;
  for (const Block& b : blocks) {
    if (b.expect == Block::Expect::pattern) wrong += wrong_bytes(b.ptr, b.bytes, b.tag);
    if (b.expect == Block::Expect::zero) wrong += nonzero_bytes(b.ptr, b.bytes);
  }
  return wrong;
}

inline std::size_t live_bytes(const std::vector<Block>& blocks) {
  std::size_t n = 0;
  for (const Block& b : blocks) n += b.bytes;
  return n;
}

/// Writes the pattern of `b.tag` into `b` in stream order (a kernel's write).
inline void fill_on(SimDriver& sim, cudaStream_t stream, Block& b) {
  b.expect = Block::Expect::pattern;
  const Block copy = b;
  sim.launch(stream, [copy] { write_pattern(copy.ptr, copy.bytes, copy.tag); });
}

/// Checks `blocks` in stream order on `stream` (a kernel's read), adding the
/// wrong bytes to `*wrong` when it runs.
inline void check_on(SimDriver& sim, cudaStream_t stream, const std::vector<Block>& blocks,
                     std::atomic<std::size_t>* wrong) {
  sim.launch(stream, [blocks, wrong] { wrong->fetch_add(wrong_in(blocks)); });
}

/// A calls counter of the simulation (every thread's calls).
inline std::size_t calls(const SimDriver& sim, SimCall call) { return sim.counters().of(call); }

/// The host pins a sleep or a reservation asks of the simulation: mappings,
/// registrations and cudaHostAlloc calls begun.
inline std::size_t pin_calls(const SimDriver& sim) {
  const SimCounters c = sim.counters();
  return c.of(SimCall::host_map) + c.of(SimCall::host_register_on) + c.of(SimCall::host_alloc) +
         c.of(SimCall::host_alloc_on);
}

/// Polls `done` every millisecond for up to `limit`: whether it came true.
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::milliseconds(20000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace sova::first_sleep
