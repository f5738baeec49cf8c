// sova — internal side of the process driver (public side: sova/driver.hpp,
// process_driver() / set_process_driver()).
#pragma once

#include <sova/driver.hpp>

namespace sova::detail {

/// Fixes the process driver for good and returns it. The C API calls this
/// when it creates a pool (every time is fine; only the first one matters):
/// from then on set_process_driver() returns cudaErrorInvalidValue, since
/// pools hold handles that only the driver which made them understands.
/// Choosing and locking happen under one lock, so the returned driver is the
/// one every later process_driver() call returns. Thread-safe; never fails.
Driver& lock_process_driver() noexcept;

}  // namespace sova::detail
