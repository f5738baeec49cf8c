// sova — the exceptions the C++ API throws. Each carries the cudaError_t the
// CUDA runtime would return for the same failure, so that a caller (and the C
// API) can map it back.
#pragma once

#include <sova/export.h>

#include <cuda_runtime_api.h>

#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace sova {

/// Thrown by Pool::allocate when memory cannot be had. The message carries the
/// request and the pool's statistics.
class SOVA_API OutOfMemory : public std::bad_alloc {
 public:
  OutOfMemory(std::string message, cudaError_t error) : message_(std::move(message)), error_(error) {}
  const char* what() const noexcept override { return message_.c_str(); }
  cudaError_t error() const noexcept { return error_; }

 private:
  std::string message_;
  cudaError_t error_;
};

/// Thrown for misuse (foreign pointer, double free, bad attribute) and for
/// driver failures other than running out of memory.
class SOVA_API Error : public std::runtime_error {
 public:
  Error(const std::string& message, cudaError_t error) : std::runtime_error(message), error_(error) {}
  cudaError_t error() const noexcept { return error_; }

 private:
  cudaError_t error_;
};

}  // namespace sova
