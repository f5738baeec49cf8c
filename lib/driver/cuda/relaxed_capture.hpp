// sova — running driver calls under relaxed stream-capture mode.
//
// While any thread captures a stream in cudaStreamCaptureModeGlobal (the
// default), a "potentially unsafe" call (cuMemCreate, cuMemMap, cuMemUnmap,
// cuMemRelease, cudaMalloc, ...) from a thread in global mode invalidates
// that capture (cudaErrorStreamCaptureUnsupported, then EndCapture fails).
// sova's own VMM calls never touch a capturing stream, so they are safe in
// fact: each runs with the calling thread switched to relaxed mode and
// switched back afterwards (cudaThreadExchangeStreamCaptureMode, a
// thread-local exchange), so that a pool growing or shrinking on any thread
// never breaks a capture. The same holds for the pool's other calls that
// never touch a capturing stream: event records, queries and synchronizes,
// queries and synchronizes of its own streams, pinned host memory and copies
// (under a global capture each is an unsafe call too). Calls the runtime forbids during capture whatever
// the mode (a device synchronize while a stream of the device captures)
// are not made legal by this.
#pragma once

#include "driver/cuda/runtime_call.hpp"

#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

class RelaxedCapture {
 public:
  RelaxedCapture() noexcept : ok_(quiet([&] { return cudaThreadExchangeStreamCaptureMode(&saved_); }) == cudaSuccess) {}
  ~RelaxedCapture() {
    if (ok_) (void)cudaThreadExchangeStreamCaptureMode(&saved_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode saved_ = cudaStreamCaptureModeRelaxed;  // exchanged in: the mode during the scope
  bool ok_;
};

}  // namespace sova::cuda_detail
