#include "driver/cuda/cuda_driver.hpp"

#include "base/no_destroy.hpp"

namespace sova {

Driver& cuda_driver() noexcept {
  // Never destroyed: pools torn down during static destruction still call it.
  // Construction touches no CUDA (the entry points load on first real use),
  // so this is cheap and cannot fail.
  static detail::NoDestroy<cuda_detail::CudaDriver> driver;
  return driver.get();
}

}  // namespace sova
