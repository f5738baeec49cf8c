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

#include "driver/cuda/entry_points.hpp"

#include <cuda_runtime_api.h>

namespace sova::cuda_detail {

class RelaxedCapture {
 public:
  // The driver's cuThreadExchangeStreamCaptureMode, not the runtime's: the
  // runtime's would make a primary context current on a thread that has none,
  // which sova's calls must not do to their callers.
  RelaxedCapture() noexcept {
    const EntryPoints& cu = entry_points();
    ok_ = cu.status == cudaSuccess && cu.thread_exchange_capture_mode != nullptr &&
          cu.thread_exchange_capture_mode(&saved_) == CUDA_SUCCESS;
  }
  ~RelaxedCapture() {
    if (ok_) (void)entry_points().thread_exchange_capture_mode(&saved_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  CUstreamCaptureMode saved_ = CU_STREAM_CAPTURE_MODE_RELAXED;  // exchanged in: the mode during the scope
  bool ok_ = false;
};

}  // namespace sova::cuda_detail
