// GraphMemory: allocations and frees made on a stream under CUDA graph
// capture, with the semantics of the runtime's graph memory nodes
// (docs/graphs.md).
//
//  * An allocation during capture gets a block that no stream's pending work
//    touches, taken from the pool (GraphBlockSource) and held by the graph
//    being captured: its address is fixed for the graph's life, and every
//    launch of the graph may use it. Nothing is enqueued on the capturing
//    stream; the driver calls this makes run with the thread in relaxed
//    capture mode, so they never invalidate a capture.
//  * A free during the same capture makes the block reusable by later
//    allocations of that capture on the stream the free was captured on
//    (in capture order, that stream's later nodes follow the free); on
//    other streams of the capture nothing proves the order, so they do not
//    get it.
//  * A block allocated during capture and not freed in it stays the graph's:
//    valid after each launch. A free of it afterwards (on any stream, or in
//    another capture) is accepted and final for the caller, but its memory
//    stays with the graph, so that launching again is always safe: sova acts
//    like cudaGraphInstantiateFlagAutoFreeOnLaunch there.
//  * Once the graph and every executable made from it are destroyed and
//    their launches complete, the driver calls back (Driver::graph_on_release,
//    a CUDA user object). The callback only queues the capture's id; the
//    next call into GraphMemory (collect(), which the pool's allocate and free
//    reach cheaply) returns the graph's blocks to the pool as frees known
//    complete.
//
// Thread safety: every method may be called from any thread; one mutex over
// the tables, never held across a call into the source. The release
// callback takes only the inbox's own mutex.
#pragma once

#include <sova/driver.hpp>
#include <sova/graphs.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sova::detail {

/// Where graph memory comes from and goes back to.
class GraphBlockSource {
 public:
  virtual ~GraphBlockSource() = default;
  /// A block of at least `bytes` that no stream's pending work touches, live
  /// (the source's) until given back; the source's error (out of memory)
  /// otherwise, with nothing changed. Called with the thread in relaxed
  /// capture mode.
  virtual cudaError_t take(std::size_t bytes, void** out) noexcept = 0;
  /// Blocks from take() that nothing uses any more (their graphs and
  /// launches are gone): free, and complete, for every stream.
  virtual void give_back(const std::vector<void*>& blocks) noexcept = 0;
};

class GraphMemory {
 public:
  GraphMemory(Driver& driver, GraphBlockSource& source);
  /// Graphs still alive keep their blocks' addresses, but the pool that
  /// holds the memory is going away: destroy graphs before their pool.
  ~GraphMemory();
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;

  /// An allocation of `bytes` (> 0) on `stream`, which captures. Errors:
  /// cudaErrorStreamCaptureInvalidated (the capture is invalidated),
  /// cudaErrorStreamCaptureUnsupported (the driver cannot name the graph
  /// or tie memory to its life), the source's (out of memory); then nothing
  /// changed and the capture is as it was.
  cudaError_t allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept;
  /// Whether `ptr` is graph memory; if so, handles its free on `stream` and
  /// stores the result in `*result` (cudaErrorInvalidValue for a second free).
  /// Cheap (one atomic load) while graphs hold nothing.
  bool deallocate(void* ptr, cudaStream_t stream, cudaError_t* result) noexcept;

  /// Whether a graph was released since the last collect().
  bool has_released() const noexcept { return inbox_->pending.load(std::memory_order_acquire); }
  /// Gives the blocks of released graphs back to the source. Not from a
  /// release callback; never while holding a lock the source takes.
  void collect() noexcept;
  /// Whether a capture that allocated here may still be in progress (asks
  /// the driver about each one not yet known to have ended): while one is, a
  /// device synchronize would invalidate it.
  bool capture_in_progress() noexcept;

  GraphMemoryStats stats() noexcept;
  /// held_bytes_high = held_bytes (cudaGraphMemAttrUsedMemHigh's reset).
  void reset_high() noexcept;

 private:
  /// One capture and then its graph: the blocks it holds.
  struct Graph {
    unsigned long long capture_id = 0;
    cudaStream_t stream = nullptr;  ///< a stream it was captured on (capture_in_progress)
    bool capture_ended = false;
    std::vector<void*> blocks;
    /// Blocks freed during the capture, by the id of the stream the free was
    /// captured on, then by size: what later allocations of the capture on
    /// that stream may reuse.
    std::map<unsigned long long, std::multimap<std::size_t, void*>> reusable;
  };
  struct BlockInfo {
    Graph* graph = nullptr;
    std::size_t bytes = 0;
    bool live = true;          ///< allocated in the graph and not freed in it
    bool caller_freed = false;  ///< freed after its capture: final for the caller
  };
  /// Where release callbacks leave the ids of released captures. Shared with
  /// the callbacks' tickets, so that a callback after the pool is gone
  /// touches nothing freed.
  struct Inbox {
    std::mutex mu;
    std::vector<unsigned long long> released;
    std::atomic<bool> pending{false};
  };
  struct Ticket {
    std::shared_ptr<Inbox> inbox;
    unsigned long long capture_id;
  };
  static void on_release(void* ticket) noexcept;

  /// The graph of `info`'s capture, registered with the driver on first use;
  /// nullptr (and *error) when the driver refuses. mu_ held.
  Graph* graph_for(const CaptureInfo& info, cudaStream_t stream, cudaError_t* error) noexcept;

  Driver& driver_;
  GraphBlockSource& source_;
  std::shared_ptr<Inbox> inbox_;
  std::atomic<std::size_t> held_blocks_{0};  ///< deallocate's fast check

  std::mutex mu_;
  std::map<unsigned long long, std::unique_ptr<Graph>> graphs_;  // by capture id
  std::unordered_map<void*, BlockInfo> blocks_;
  std::uint64_t held_bytes_ = 0;
  std::uint64_t held_bytes_high_ = 0;
  std::uint64_t released_graphs_ = 0;
};

}  // namespace sova::detail
