// A kernel that keeps a stream busy for a while, so tests can observe work
// that is not yet complete (cudaErrorNotReady) and ordering between streams.
#pragma once

#include <cuda_runtime_api.h>

namespace sova::gputest {

/// Enqueues one thread that spins on the GPU's global timer for about
/// `nanoseconds`. Returns the launch's error.
cudaError_t launch_spin(cudaStream_t stream, unsigned long long nanoseconds);

}  // namespace sova::gputest
