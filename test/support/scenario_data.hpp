// What the randomized scenario tests share: the seeds a scenario runs (one
// seed replayed from the environment) and reproducible bytes to write.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

namespace sova::test {

/// The seeds a random scenario runs: SOVA_SCENARIO_SEED alone when set (to
/// replay the seed a failure printed), else `defaults`.
inline std::vector<std::uint64_t> scenario_seeds(std::initializer_list<std::uint64_t> defaults) {
  if (const char* env = std::getenv("SOVA_SCENARIO_SEED"); env != nullptr && *env != '\0')
    return {std::strtoull(env, nullptr, 0)};
  return defaults;
}

/// `bytes` reproducible bytes for `seed` (xorshift64, eight bytes a step):
/// different seeds give different contents.
inline std::vector<unsigned char> pattern(std::size_t bytes, std::uint64_t seed) {
  std::vector<unsigned char> v(bytes);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (std::size_t i = 0; i < bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, std::min<std::size_t>(8, bytes - i));
  }
  return v;
}

}  // namespace sova::test
