// sova sim — failure injection: one FailPoint per injectable driver call.
//
// arm(n, error) makes the n-th next guarded call (1 = the very next) fail with
// `error`; fire() is called once at the start of every guarded call, before
// any validation, so "the n-th call" counts every call whatever its outcome.
// A call that fires returns at once and changes nothing (the Driver contract:
// a failed call has no effect).
//
// Not synchronized itself: the owner calls arm() and fire() under the lock that
// guards the operation (SimMemory's mutex), which also keeps the count exact
// when several threads race on the same operation.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::sim {

class FailPoint {
 public:
  /// n <= 0 disarms.
  void arm(int n, cudaError_t error) noexcept {
    countdown_ = n > 0 ? n : 0;
    error_ = error;
  }

  /// True (and `*error` set) when this call is the armed one; disarms itself.
  bool fire(cudaError_t* error) noexcept {
    if (countdown_ == 0) return false;
    if (--countdown_ != 0) return false;
    *error = error_;
    return true;
  }

 private:
  int countdown_ = 0;  // calls left until the failing one; 0 = disarmed
  cudaError_t error_ = cudaSuccess;
};

}  // namespace sova::sim
