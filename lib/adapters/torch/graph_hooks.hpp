// sova_torch — the CUDA graph hooks of PyTorch's CUDAPluggableAllocator
// (begin/end_allocate_to_pool, release_pool). The hooks with C types
// (record_stream, reset, mem_pool()'s segment source) are in sova_torch.h.
//
// PyTorch takes these as raw function addresses (python/sova/torch.py passes
// them to the allocator's set_* methods, which reinterpret_cast the address to
// the std::function's signature). So their parameter types must be exactly
// PyTorch's: c10::cuda::MempoolId_t is std::pair<unsigned long long, unsigned
// long long> and the stream filter a std::function<bool(cudaStream_t)>, both
// passed by value with the C++ ABI of libstdc++ that PyTorch's Linux wheels
// use. sova is not built against PyTorch; these aliases restate its types.
//
// What each hook does, and why so little (docs/python.md, "CUDA graphs"):
// under sova.torch.enable() sova decides by itself whether a stream is being
// captured, and memory handed to a graph returns to the pool when the graph
// and its executables are destroyed, which sova learns from CUDA, not from
// PyTorch. PyTorch calls begin before cudaStreamBeginCapture, end after
// cudaStreamEndCapture and release just before destroying the executable: the
// hooks use those moments to retry frees deferred while a stream was captured.
#pragma once

#include <sova/export.h>

#include <cuda_runtime_api.h>

#include <functional>
#include <utility>

namespace sova::torch_adapter {

/// c10::cuda::MempoolId_t.
using TorchMempoolId = std::pair<unsigned long long, unsigned long long>;
/// The filter of CUDAAllocator::beginAllocateToPool: true for streams whose
/// allocations go to the pool.
using TorchStreamFilter = std::function<bool(cudaStream_t)>;

/// Switches the calling thread to cudaStreamCaptureModeRelaxed for its life,
/// so that driver calls it makes (stream creation, synchronizing a stream that
/// is not captured) never invalidate another thread's capture; restores the
/// thread's mode on exit.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept;
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_;
  bool exchanged_;
};

}  // namespace sova::torch_adapter

extern "C" {

/// set_begin_allocate_to_pool: called by CUDAGraph::capture_begin before the
/// capture starts. Retries deferred frees. The filter is not kept: sova asks
/// CUDA which streams are captured.
SOVA_API void sova_torch_begin_allocate_to_pool(int device, sova::torch_adapter::TorchMempoolId pool,
                                                sova::torch_adapter::TorchStreamFilter filter);
/// set_end_allocate_to_pool_fn: called by CUDAGraph::capture_end after the
/// capture ended. Retries the frees deferred during it.
SOVA_API void sova_torch_end_allocate_to_pool(int device, sova::torch_adapter::TorchMempoolId pool);
/// set_release_pool: called by CUDAGraph::reset before the executable graph is
/// destroyed. Retries deferred frees; the graph's memory itself returns to the
/// pool when CUDA destroys the graph and its executables.
SOVA_API void sova_torch_release_pool(int device, sova::torch_adapter::TorchMempoolId pool);

}  // extern "C"
