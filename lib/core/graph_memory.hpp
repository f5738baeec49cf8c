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
//    valid after each launch. A free of it afterwards is accepted once and
//    final for the caller, but its memory stays with the graph, so that
//    launching again is always safe: sova acts like
//    cudaGraphInstantiateFlagAutoFreeOnLaunch there. Such a free is still
//    ordered after the work before it on its stream: made outside capture, the
//    block goes back, once the graph is released, as a free on that stream
//    (GraphBlockSource::give_back_freed_on), complete only when that stream's
//    work is; made under another capture, the block is held by that capture's
//    graph too (its launches use it before their free node) and goes back
//    once both graphs are released.
//  * Once the graph and every executable made from it are destroyed and
//    their launches complete, the driver calls back (Driver::graph_on_release,
//    a CUDA user object). The callback only queues the capture's id; the
//    next collect() (which the pool's allocations, frees, statistics and
//    trims reach cheaply, has_released()) returns the graph's blocks to the
//    pool — all but those still the caller's (allocated in the graph, freed
//    neither in it nor since): as with cudaMallocAsync, destroying a graph
//    does not free what it allocated and did not free. Those stay allocated
//    in the pool, ordinary blocks that the caller's free returns (a tensor
//    may outlive the graph that made it). The release may come before or
//    after such a free: either order ends with the block free once.
//
//  * Share groups: graphs the program promises never run at once (no launch
//    of one while a launch of another may run, on any stream) may share
//    memory. A capture joins a group when its first allocation here is on a
//    stream that capture_next_into() named for it. A block freed during a
//    member's capture is then the group's: later allocations of any other
//    member's capture (and of the same capture on the same stream, as
//    above) reuse it, smallest fit first, and it goes back to the pool only
//    once the group is destroyed and every member released. The rest is as
//    for any graph. docs/graphs.md, "Graphs that never run at once".
//
// Thread safety: every method may be called from any thread; one mutex over
// the tables, never held across a call into the source. collect() is atomic
// for every caller that saw has_released(): the flag stays set until the
// collect that took the releases has given their blocks back, and a second
// collect waits for the first (collect_mu_). The release callback takes only
// the inbox's own mutex.
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
#include <utility>
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
  /// A block from take() whose graphs are gone and that its caller freed on
  /// `stream` (outside capture) while a graph held it: free as an ordinary
  /// free on `stream` made now (so after the caller's, never before),
  /// complete only once that stream's work so far is.
  /// A block from take(), freed and reused within one capture, now serves
  /// an allocation of `bytes` (what the pool counts as used for it).
  virtual void requested(void* block, std::size_t bytes) noexcept = 0;
  /// `freer`: the opaque token the pool passed to deallocate() with the
  /// caller's free (its stream's state: the handle may be destroyed by now,
  /// so it is never used again).
  virtual void give_back_freed_on(void* block, void* freer) noexcept = 0;
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
  /// Cheap (one atomic load) while graphs hold nothing. The pool asks only
  /// for blocks flagged at take (Block::graph_memory).
  /// `freer`: the pool's token for `stream` (handed back by give_back_freed_on).
  bool deallocate(void* ptr, cudaStream_t stream, void* freer, cudaError_t* result) noexcept;

  /// Whether a graph was released and its blocks are not yet all given back:
  /// set by the release callback, cleared only once the collect() that took
  /// the release is done. One atomic load: the pool's fast paths ask it.
  bool has_released() const noexcept { return inbox_->pending.load(std::memory_order_acquire); }
  /// Gives the blocks of released graphs back to the source; when it
  /// returns, every release queued before the call is collected (waiting for
  /// another thread's collect in progress). Not from a release callback;
  /// never while holding a lock the source takes, nor from the source's
  /// give_back (it would wait for itself).
  void collect() noexcept;
  /// `stream` is not capturing (the pool's allocate saw it): captures that
  /// allocated on it have ended. Inline and cheap unless a capture is open.
  void outside_capture(cudaStream_t stream) noexcept {
    if (open_captures_.load(std::memory_order_relaxed) != 0) outside_capture_slow(stream);
  }
  /// Whether a capture that allocated here may still be in progress: while
  /// one may, a device synchronize could invalidate it. A capture counts as
  /// ended once its graph is released, or once a call of the pool on the
  /// stream it allocated on finds that stream outside it. (The stream is
  /// never queried otherwise: its handle may be destroyed by then.)
  bool capture_in_progress() const noexcept { return open_captures_.load(std::memory_order_relaxed) != 0; }
  /// The count behind capture_in_progress(), for a reader that must not
  /// depend on GraphMemory (the pool's stream registry).
  const std::atomic<std::size_t>& open_captures() const noexcept { return open_captures_; }

  /// A new share group, its id (from 1, never reused in this pool); 0 when
  /// host memory lacks.
  std::uint64_t create_group() noexcept;
  /// No capture joins `group` any more; its memory goes back to the pool once
  /// its last member is released (at once when none is alive).
  /// cudaErrorInvalidValue for an id that names no group not yet destroyed.
  cudaError_t destroy_group(std::uint64_t group) noexcept;
  /// The next capture whose first allocation here is on `stream` joins
  /// `group` (0: none, cancelling an earlier call for `stream`). One capture
  /// only: each capture is named anew. cudaErrorInvalidValue for a group not
  /// open, or `stream` the legacy stream (which cannot capture).
  cudaError_t capture_next_into(cudaStream_t stream, std::uint64_t group) noexcept;

  GraphMemoryStats stats() noexcept;
  /// What each graph holds, by capture id (released graphs collected first).
  GraphMemorySnapshot snapshot() noexcept;
  /// held_bytes_high = held_bytes (cudaGraphMemAttrUsedMemHigh's reset).
  void reset_high() noexcept;

 private:
  struct Group;
  /// One capture and then its graph: the blocks it holds.
  struct Graph {
    Group* group = nullptr;  ///< the share group it joined, if any
    bool allocated = false;  ///< its capture allocated here (a free of another graph's block may come first)
    unsigned long long capture_id = 0;
    cudaStream_t stream = nullptr;  ///< the stream of its first allocation (capture_in_progress)
    bool capture_ended = false;
    /// The blocks it allocated, and blocks of other graphs whose caller's
    /// free it captured (BlockInfo::freed_in).
    std::vector<void*> blocks;
    /// Blocks freed during the capture, by the id of the stream the free was
    /// captured on, then by size: what later allocations of the capture on
    /// that stream may reuse.
    std::map<std::uintptr_t, std::multimap<std::size_t, void*>> reusable;  ///< by the freeing stream's handle
  };
  /// A share group: the blocks its members' captures freed, which it holds
  /// until it is destroyed and its last member released.
  struct Group {
    std::uint64_t id = 0;
    bool open = true;         ///< not destroyed: captures may still join
    std::size_t members = 0;  ///< graphs joined and not yet released
    std::vector<void*> blocks;
    /// A held block no allocation uses now, and which capture freed it on
    /// which stream: that capture itself may reuse it on that stream only.
    struct Free {
      void* block;
      unsigned long long freed_by;
      std::uintptr_t stream_key;
    };
    std::multimap<std::size_t, Free> reusable;  ///< by size
  };
  struct BlockInfo {
    /// The graph that allocated it; nullptr once released while `freed_in` holds it.
    Graph* graph = nullptr;
    std::size_t bytes = 0;
    bool live = true;           ///< allocated in the graph and not freed in it
    bool caller_freed = false;  ///< freed after its capture: final for the caller
    /// The caller's free was made outside capture, on `freed_on`: the block
    /// goes back as a free on that stream (give_back_freed_on).
    bool freed_eagerly = false;
    void* freed_on = nullptr;
    /// The caller's free was captured in another graph, which holds the
    /// block too until it is released (nullptr: none, or released).
    Graph* freed_in = nullptr;
    /// The share group holding it (freed during a member's capture), which
    /// gives it back when the group is gone; nullptr: none.
    Group* group = nullptr;
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
  /// What becomes of the blocks `graph` holds now that it is released: they
  /// are added to `complete` or `freed_on`, or stay (the caller's, or held by
  /// another graph). mu_ held.
  void release_locked(Graph& graph, std::vector<void*>& complete,
                      std::vector<std::pair<void*, void*>>& freed_on) noexcept;
  /// The block `it` names is held by nothing any more: its entry goes, and
  /// the block to `complete` or `freed_on`, or stays the caller's. mu_ held.
  void retire_locked(std::unordered_map<void*, BlockInfo>::iterator it, std::vector<void*>& complete,
                     std::vector<std::pair<void*, void*>>& freed_on) noexcept;
  /// `graph` is released: one member fewer for its group, which goes when
  /// it was destroyed and this was its last. mu_ held.
  void leave_group_locked(Graph& graph, std::vector<void*>& complete,
                          std::vector<std::pair<void*, void*>>& freed_on) noexcept;
  /// The group with id `id` is gone: its blocks held by no graph are
  /// retired, the others left to the graphs that hold them. mu_ held.
  void release_group_locked(std::uint64_t id, std::vector<void*>& complete,
                            std::vector<std::pair<void*, void*>>& freed_on) noexcept;
  /// `graph`'s first allocation, on `stream_key`: it joins the group named
  /// for that stream's next capture, if any, and the name is spent. mu_ held.
  void join_named_group_locked(Graph& graph, std::uintptr_t stream_key) noexcept;
  /// A block of `graph`'s group that an allocation of `bytes` in `graph`'s
  /// capture on `stream_key` may reuse, taken off the group's free list;
  /// nullptr when none. mu_ held.
  void* take_shared_locked(Graph& graph, std::uintptr_t stream_key, std::size_t bytes) noexcept;
  /// A free during `graph`'s capture (a member's) of its block `ptr`: the
  /// group's now. mu_ held. False when host memory lacks (nothing changed).
  bool give_to_group_locked(Graph& graph, BlockInfo& b, void* ptr, unsigned long long capture_id,
                            std::uintptr_t stream_key) noexcept;
  void outside_capture_slow(cudaStream_t stream) noexcept;
  /// The capture of `graph` is over. mu_ held.
  void end_capture_locked(Graph& graph) noexcept;
  /// Every open capture that allocated on `stream` is over, but the one with
  /// id `still_open` (0: none). mu_ held.
  void end_captures_on_locked(cudaStream_t stream, unsigned long long still_open) noexcept;

  /// The graph of `info`'s capture, registered with the driver on first use;
  /// nullptr (and *error) when the driver refuses. mu_ held.
  Graph* graph_for(const CaptureInfo& info, cudaStream_t stream, cudaError_t* error) noexcept;

  Driver& driver_;
  GraphBlockSource& source_;
  std::shared_ptr<Inbox> inbox_;
  std::mutex collect_mu_;  ///< held by collect() throughout; taken before mu_
  std::atomic<std::size_t> held_blocks_{0};    ///< deallocate's fast check
  std::atomic<std::size_t> open_captures_{0};  ///< graphs whose capture may be in progress

  std::mutex mu_;
  std::map<unsigned long long, std::unique_ptr<Graph>> graphs_;  // by capture id
  std::unordered_map<void*, BlockInfo> blocks_;
  std::map<std::uint64_t, std::unique_ptr<Group>> groups_;  // by id
  std::uint64_t next_group_ = 1;
  /// capture_next_into's requests: the group a stream's next capture joins, by handle.
  std::map<std::uintptr_t, std::uint64_t> joining_;
  std::uint64_t held_bytes_ = 0;
  std::uint64_t held_bytes_high_ = 0;
  std::uint64_t released_graphs_ = 0;
};

}  // namespace sova::detail
