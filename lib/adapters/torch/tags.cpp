// sova_torch — allocation tags (tags.hpp).
#include "tags.hpp"

#include "state.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <string>

namespace sova::torch_adapter {
namespace {

thread_local int t_tag = 0;

struct TagPools {
  std::mutex mutex;  ///< creation
  std::array<std::array<std::atomic<sovaMemPool_t>, kMaxDevices>, kMaxTags> pools{};
};

TagPools& tag_pools() noexcept {
  static TagPools* pools = new TagPools;  // never destroyed: frees may come at exit
  return *pools;
}

}  // namespace

int current_tag() noexcept { return t_tag; }

cudaError_t tagged_pool_for(int tag, int device, sovaMemPool_t* out) noexcept {
  TagPools& t = tag_pools();
  std::atomic<sovaMemPool_t>& slot = t.pools[static_cast<std::size_t>(tag)][static_cast<std::size_t>(device)];
  if (sovaMemPool_t p = slot.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  State& s = state();
  std::lock_guard lock(s.mutex);  // the options, and one creation at a time
  if (sovaMemPool_t p = slot.load(std::memory_order_acquire)) {
    *out = p;
    return cudaSuccess;
  }
  sovaMemPool_t pool = nullptr;
  bool create_failed = false;
  const cudaError_t err = create_pool_with_options(s.options, device, &pool, &create_failed);
  if (err != cudaSuccess) {
    set_last_error("sova: cannot create the pool of tag " + std::to_string(tag) + " on device " +
                   std::to_string(device) + " (cudaError " + std::to_string(static_cast<int>(err)) + ")");
    return err;
  }
  s.any_pool = true;
  slot.store(pool, std::memory_order_release);
  *out = pool;
  return cudaSuccess;
}

std::uint64_t tag_pools_attribute(int device, cudaMemPoolAttr attr) noexcept {
  std::uint64_t sum = 0;
  for (int tag = 1; tag < kMaxTags; ++tag) {
    sovaMemPool_t p =
        tag_pools().pools[static_cast<std::size_t>(tag)][static_cast<std::size_t>(device)].load(std::memory_order_acquire);
    std::uint64_t value = 0;
    if (p != nullptr && sovaMemPoolGetAttribute(p, attr, &value) == cudaSuccess) sum += value;
  }
  return sum;
}

void trim_tag_pools(int device) noexcept {
  for (int tag = 1; tag < kMaxTags; ++tag)
    if (sovaMemPool_t p = tag_pools().pools[static_cast<std::size_t>(tag)][static_cast<std::size_t>(device)].load(
            std::memory_order_acquire))
      (void)sovaMemPoolTrimTo(p, 0);
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

int sova_torch_set_tag(int tag) {
  if (tag < 0 || tag >= kMaxTags) {
    set_last_error("sova_torch_set_tag: tag " + std::to_string(tag) + " out of range 0.." +
                   std::to_string(kMaxTags - 1));
    return -1;
  }
  const int previous = t_tag;
  t_tag = tag;
  return previous;
}

sovaMemPool_t sova_torch_tag_pool(int tag, int device) {
  if (tag < 0 || tag >= kMaxTags || device < 0 || device >= kMaxDevices) return nullptr;
  if (tag == 0) return sova_torch_pool(device);
  return tag_pools().pools[static_cast<std::size_t>(tag)][static_cast<std::size_t>(device)].load(
      std::memory_order_acquire);
}
