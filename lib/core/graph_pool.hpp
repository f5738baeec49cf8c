// PoolGraphs: a pool's graph memory (GraphMemory) and where it comes from:
// the pool itself, through a stream the pool owns.
//
// Graph memory must be free of every stream's pending work, since a graph may
// be launched on any stream at any time. So it is allocated from the pool on
// a private stream that carries no work but the pool's own (the waits the
// slow path may insert for another stream's fenced frees), and that stream is
// synchronized before the block is handed to the graph: the block is then
// complete for everyone. Returned, the blocks are freed on that same stream
// and marked complete (Pool::stream_synchronized's path): their graphs and
// launches are gone, nothing uses them. A block its caller freed on a stream
// while a graph held it is freed on that stream instead, as an ordinary free.
// The private stream is made on the first allocation under capture,
// destroyed with the pool.
#pragma once

#include "core/graph_memory.hpp"

#include <mutex>

namespace sova::detail {

class PoolCore;

class PoolGraphs final : public GraphBlockSource {
 public:
  explicit PoolGraphs(PoolCore& core);
  ~PoolGraphs() override;
  PoolGraphs(const PoolGraphs&) = delete;
  PoolGraphs& operator=(const PoolGraphs&) = delete;

  GraphMemory& memory() noexcept { return memory_; }

  cudaError_t take(std::size_t bytes, void** out) noexcept override;
  void give_back(const std::vector<void*>& blocks) noexcept override;
  void give_back_freed_on(void* block, void* freer) noexcept override;
  void requested(void* block, std::size_t bytes) noexcept override;

 private:
  /// The private stream, made on first use; nullptr (and *error) if the driver cannot.
  cudaStream_t private_stream(cudaError_t* error) noexcept;

  PoolCore& core_;
  GraphMemory memory_;
  std::mutex stream_mu_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace sova::detail
