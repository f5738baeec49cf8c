// BlockAlias: the chunks under a block mapped whole (the driver maps no part
// of a physical allocation) in a reservation of their own, in the same order
// and spacing as in the pool, so the block sits at the same offset from the
// first chunk's start in both.
#include <sova/alias.hpp>

#include <string>
#include <vector>

namespace sova {

BlockAlias::BlockAlias(Pool& pool, void* ptr, cudaMemAccessFlags access)
    : driver_(pool.driver()), device_(pool.device()), block_(ptr), size_(pool.block_size(ptr)) {
  if (access != cudaMemAccessFlagsProtRead && access != cudaMemAccessFlagsProtReadWrite) {
    throw Error("sova: an alias is mapped read-only or read-write", cudaErrorInvalidValue);
  }
  std::vector<Pool::ChunkView> chunks;
  if (size_ == 0 || pool.chunks_under(ptr, size_, &chunks) != cudaSuccess || chunks.empty()) {
    throw Error("sova: an alias needs the start of a live block of the pool", cudaErrorInvalidValue);
  }
  const std::size_t first = chunks.front().offset;
  span_ = chunks.back().offset + chunks.back().bytes - first;
  offset_ = reinterpret_cast<std::uintptr_t>(ptr) - pool.va_base() - first;
  if (const cudaError_t err = driver_.address_reserve(span_, pool.granularity(), &base_); err != cudaSuccess) {
    throw Error(std::string("sova: reserving VA for an alias failed: ") + cudaGetErrorName(err), err);
  }
  auto undo = [&] {
    for (const auto& [at, bytes] : mapped_) driver_.unmap(base_ + at, bytes);
    driver_.address_free(base_, span_);
  };
  cudaError_t err = cudaSuccess;
  for (const Pool::ChunkView& c : chunks) {
    err = driver_.map(base_ + (c.offset - first), c.bytes, c.handle);
    if (err != cudaSuccess) break;
    mapped_.emplace_back(c.offset - first, c.bytes);
  }
  if (err == cudaSuccess) {
    cudaMemAccessDesc desc{};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = device_;
    desc.flags = access;
    err = driver_.set_access(base_, span_, &desc, 1);
  }
  if (err != cudaSuccess) {
    undo();
    throw Error(std::string("sova: mapping an alias failed: ") + cudaGetErrorName(err), err);
  }
}

BlockAlias::~BlockAlias() {
  driver_.device_synchronize(device_);  // work may still use the view
  for (const auto& [at, bytes] : mapped_) driver_.unmap(base_ + at, bytes);
  driver_.address_free(base_, span_);
}

}  // namespace sova
