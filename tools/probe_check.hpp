// The driver-API probes' CHECK: a call that fails prints its name and result
// and ends the probe (exit 1), so no later figure is read from a broken setup.
#pragma once

#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call) \
  do { \
    CUresult r_ = (call); \
    if (r_ != CUDA_SUCCESS) { \
      const char* s_ = nullptr; \
      cuGetErrorName(r_, &s_); \
      std::printf("FAILED %s: %s (line %d)\n", #call, s_ ? s_ : "?", __LINE__); \
      std::exit(1); \
    } \
  } while (0)
