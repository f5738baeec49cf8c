// PoolGraphs: graph memory taken from and given back to a pool (graph_pool.hpp).
#include "core/graph_pool.hpp"

#include "core/pool_core.hpp"

namespace sova::detail {

PoolGraphs::PoolGraphs(PoolCore& core) : core_(core), memory_(core.driver(), *this) {}

PoolGraphs::~PoolGraphs() {
  if (stream_ != nullptr) core_.driver().stream_destroy(stream_);
}

cudaStream_t PoolGraphs::private_stream(cudaError_t* error) noexcept {
  std::lock_guard<std::mutex> lock(stream_mu_);
  if (stream_ == nullptr) {
    const cudaError_t e = core_.driver().stream_create(core_.device(), &stream_);
    if (e != cudaSuccess) {
      stream_ = nullptr;
      // A driver that cannot make streams cannot serve graphs.
      *error = e == cudaErrorNotSupported ? cudaErrorStreamCaptureUnsupported : e;
      return nullptr;
    }
  }
  return stream_;
}

cudaError_t PoolGraphs::take(std::size_t bytes, void** out) noexcept {
  cudaError_t error = cudaSuccess;
  cudaStream_t stream = private_stream(&error);
  if (stream == nullptr) return error;
  void* block = nullptr;
  if (cudaError_t e = core_.allocate(&block, bytes, stream); e != cudaSuccess) return e;
  // Waits the slow path may have put on the private stream: once they are
  // done, the block is free of every stream's work.
  if (cudaError_t e = core_.driver().stream_synchronize(stream); e != cudaSuccess) {
    core_.deallocate(block, stream);
    return e;
  }
  core_.mark_graph_memory(block);
  *out = block;
  return cudaSuccess;
}

void PoolGraphs::give_back(const std::vector<void*>& blocks) noexcept {
  cudaError_t error = cudaSuccess;
  cudaStream_t stream = private_stream(&error);  // made already: take() made the blocks
  if (stream == nullptr) return;
  for (void* block : blocks) core_.free_released_graph_block(block, stream);
  // Nothing uses them (their graphs and launches are gone): complete for every stream.
  core_.stream_synchronized(stream);
}

void PoolGraphs::give_back_freed_on(void* block, void* freer) noexcept {
  // The caller's free on its stream was ordered after that stream's work then;
  // stamped now, it completes with a fence or synchronize of that stream
  // after this, which covers that work too.
  core_.free_graph_output(block, static_cast<StreamState*>(freer));
}

void PoolGraphs::requested(void* block, std::size_t bytes) noexcept { core_.set_requested(block, bytes); }

}  // namespace sova::detail
