// Fuzz input, consumed a little at a time. Past the end every read is 0, so
// any byte string is a valid program (libFuzzer mutates freely).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sova::fuzz {

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  bool done() const noexcept { return pos_ >= size_; }
  std::uint8_t byte() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  /// A value in [0, n) (n > 0), from one byte (n <= 256) or more.
  std::size_t below(std::size_t n) noexcept {
    if (n <= 256) return byte() % n;
    return static_cast<std::size_t>(u64() % n);
  }
  bool flag() noexcept { return (byte() & 1) != 0; }
  std::uint64_t u64() noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | byte();
    return v;
  }
  std::uint32_t u32() noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | byte();
    return v;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace sova::fuzz
