// Every multigpu test case starts with SOVA_REQUIRE_DEVICES(2): with fewer
// devices the suite fails, it never skips (a skipped multi-GPU suite would
// read as passed).
#pragma once

#include "multigpu/multigpu_util.hpp"
#include "support/catch.hpp"

/// Fails the test case, with the count found, unless there are at least `n` devices.
#define SOVA_REQUIRE_DEVICES(n) \
  do { \
    const int sova_found_devices = ::sova::multigpu::device_count(); \
    INFO("the multigpu suite needs " << (n) << " devices; CUDA sees " << sova_found_devices \
                                     << " (CUDA_VISIBLE_DEVICES, nvidia-smi)"); \
    REQUIRE(sova_found_devices >= (n)); \
  } while (0)
