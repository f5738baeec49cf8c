// sova::Pool's sleep and wake (sova/pool.hpp): the public face of
// PoolCore::sleep / wake.
#include "core/pool_core.hpp"

#include <sova/pool.hpp>

namespace sova {

cudaError_t Pool::sleep(SleepMode mode, cudaStream_t stream) noexcept { return core_->sleep(mode, stream); }
cudaError_t Pool::wake(cudaStream_t stream) noexcept { return core_->wake(stream); }
bool Pool::asleep() const noexcept { return core_->asleep(); }
cudaError_t Pool::release_sleep_host_memory() noexcept { return core_->release_sleep_host_memory(); }
cudaError_t Pool::reserve_sleep_backup(std::size_t bytes) noexcept { return core_->reserve_sleep_backup(bytes); }
const void* Pool::sleep_backup_at(const void* ptr, std::size_t bytes, std::size_t* bytes_there) noexcept {
  return core_->sleep_backup_at(ptr, bytes, bytes_there);
}

SleepPinRefusal Pool::sleep_pin_refusal() const noexcept {
  switch (core_->sleep_pin_refusal()) {
    case detail::PinStep::none: return SleepPinRefusal::none;
    case detail::PinStep::map: return SleepPinRefusal::host_memory;
    case detail::PinStep::register_: return SleepPinRefusal::lock;
    case detail::PinStep::alloc: return SleepPinRefusal::pinned_alloc;
  }
  return SleepPinRefusal::none;
}

}  // namespace sova
