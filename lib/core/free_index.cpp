#include "core/free_index.hpp"

#include <bit>

namespace sova::detail {

std::size_t FreeIndex::class_of(std::size_t size) noexcept {
  const std::size_t units = size / kAlignment;
  if (units < kLinearUnits) return units;
  const std::size_t octave = static_cast<std::size_t>(std::bit_width(units)) - 1;  // >= kSubClassBits
  const std::size_t sub = (units >> (octave - kSubClassBits)) & (kSubClasses - 1);
  return kLinearUnits + (octave - kSubClassBits) * kSubClasses + sub;
}

namespace {
// The order of the index: size, then address.
bool before(const Block* a, const Block* b) noexcept {
  return a->size != b->size ? a->size < b->size : a->offset < b->offset;
}
}  // namespace

void FreeIndex::insert(Block* block) noexcept {
  const std::size_t klass = class_of(block->size);
  List& list = lists_[klass];
  // The first block of the class that goes after `block` (nullptr: none).
  // Checked from the tail first: a block larger than every other of its class.
  Block* after = nullptr;
  if (list.tail != nullptr && before(block, list.tail)) {
    after = list.head;
    while (!before(block, after)) after = after->free_next;
  }
  block->free_next = after;
  block->free_prev = after != nullptr ? after->free_prev : list.tail;
  (block->free_prev != nullptr ? block->free_prev->free_next : list.head) = block;
  (after != nullptr ? after->free_prev : list.tail) = block;
  block->in_free_index = true;
  bits_[klass / 64] |= std::uint64_t{1} << (klass % 64);
  summary_ |= std::uint64_t{1} << (klass / 64);
  ++count_;
}

void FreeIndex::erase(Block* block) noexcept {
  if (!block->in_free_index) return;
  const std::size_t klass = class_of(block->size);
  List& list = lists_[klass];
  (block->free_prev != nullptr ? block->free_prev->free_next : list.head) = block->free_next;
  (block->free_next != nullptr ? block->free_next->free_prev : list.tail) = block->free_prev;
  block->free_prev = block->free_next = nullptr;
  block->in_free_index = false;
  if (list.head == nullptr) {
    bits_[klass / 64] &= ~(std::uint64_t{1} << (klass % 64));
    if (bits_[klass / 64] == 0) summary_ &= ~(std::uint64_t{1} << (klass / 64));
  }
  --count_;
}

FreeIndex::const_iterator FreeIndex::lower_bound(std::size_t size) const noexcept {
  const std::size_t klass = class_of(size < kAlignment ? kAlignment : size);
  // In its own class the list is sorted: the first block of at least `size`;
  // every block of a later class is larger.
  for (Block* b = lists_[klass].head; b != nullptr; b = b->free_next) {
    if (b->size >= size) return {this, b};
  }
  return {this, first_after(klass)};
}

Block* FreeIndex::first_after_or_at(std::size_t klass) const noexcept {
  if (klass >= kClasses) return nullptr;
  std::size_t word = klass / 64;
  const std::uint64_t here = bits_[word] & (~std::uint64_t{0} << (klass % 64));
  if (here != 0) return lists_[word * 64 + static_cast<std::size_t>(std::countr_zero(here))].head;
  const std::uint64_t later = word + 1 < 64 ? summary_ & (~std::uint64_t{0} << (word + 1)) : 0;
  if (later == 0) return nullptr;
  word = static_cast<std::size_t>(std::countr_zero(later));
  return lists_[word * 64 + static_cast<std::size_t>(std::countr_zero(bits_[word]))].head;
}

Block* FreeIndex::last_before(std::size_t klass) const noexcept {
  if (klass == 0) return nullptr;
  const std::size_t last = klass - 1;  // the last class that may answer
  std::size_t word = last / 64;
  const std::uint64_t here = bits_[word] & (~std::uint64_t{0} >> (63 - last % 64));
  if (here != 0) return lists_[word * 64 + 63 - static_cast<std::size_t>(std::countl_zero(here))].tail;
  const std::uint64_t earlier = word == 0 ? 0 : summary_ & (~std::uint64_t{0} >> (64 - word));
  if (earlier == 0) return nullptr;
  word = 63 - static_cast<std::size_t>(std::countl_zero(earlier));
  return lists_[word * 64 + 63 - static_cast<std::size_t>(std::countl_zero(bits_[word]))].tail;
}

}  // namespace sova::detail
