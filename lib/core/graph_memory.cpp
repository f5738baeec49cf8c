// GraphMemory: graph memory nodes for a sova pool (graph_memory.hpp).
#include "core/graph_memory.hpp"

#include <algorithm>
#include <new>
#include <optional>
#include <utility>

namespace sova::detail {

namespace {

/// The calling thread in relaxed capture mode for a scope: what GraphMemory
/// asks of the driver and the pool during a capture then never invalidates
/// it (a physical create in global mode would).
class RelaxedMode {
 public:
  explicit RelaxedMode(Driver& driver) noexcept : driver_(driver) {
    ok_ = driver_.exchange_capture_mode(&saved_) == cudaSuccess;
  }
  ~RelaxedMode() {
    if (ok_) driver_.exchange_capture_mode(&saved_);
  }
  RelaxedMode(const RelaxedMode&) = delete;
  RelaxedMode& operator=(const RelaxedMode&) = delete;

 private:
  Driver& driver_;
  cudaStreamCaptureMode saved_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

}  // namespace

GraphMemory::GraphMemory(Driver& driver, GraphBlockSource& source)
    : driver_(driver), source_(source), inbox_(std::make_shared<Inbox>()) {}

GraphMemory::~GraphMemory() = default;

void GraphMemory::on_release(void* context) noexcept {
  // A driver thread: no CUDA, no pool lock. Only the id is queued.
  auto* ticket = static_cast<Ticket*>(context);
  {
    std::lock_guard<std::mutex> lock(ticket->inbox->mu);
    try {
      ticket->inbox->released.push_back(ticket->capture_id);
    } catch (...) {
      // No host memory: the graph's blocks stay held (a leak, never a reuse too early).
    }
    ticket->inbox->pending.store(true, std::memory_order_release);
  }
  delete ticket;
}

GraphMemory::Graph* GraphMemory::graph_for(const CaptureInfo& info, cudaStream_t stream, cudaError_t* error) noexcept {
  auto it = graphs_.find(info.id);
  if (it != graphs_.end()) return it->second.get();
  if (info.id == 0 || info.graph == nullptr) {
    *error = cudaErrorStreamCaptureUnsupported;  // a driver that cannot name the graph
    return nullptr;
  }
  try {
    auto graph = std::make_unique<Graph>();
    graph->capture_id = info.id;
    graph->stream = stream;
    auto* ticket = new Ticket{inbox_, info.id};
    auto slot = graphs_.emplace(info.id, std::move(graph)).first;
    const cudaError_t e = driver_.graph_on_release(info.graph, &GraphMemory::on_release, ticket);
    if (e != cudaSuccess) {
      delete ticket;  // never called on failure (Driver::graph_on_release)
      graphs_.erase(slot);
      *error = e == cudaErrorNotSupported ? cudaErrorStreamCaptureUnsupported : e;
      return nullptr;
    }
    open_captures_.fetch_add(1, std::memory_order_relaxed);
    return slot->second.get();
  } catch (...) {
    *error = cudaErrorMemoryAllocation;
    return nullptr;
  }
}

cudaError_t GraphMemory::allocate(void** ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (has_released()) collect();
  CaptureInfo info;
  if (cudaError_t e = driver_.stream_capture_info(stream, &info); e != cudaSuccess) return e;
  if (info.status == cudaStreamCaptureStatusInvalidated) return cudaErrorStreamCaptureInvalidated;
  if (info.status != cudaStreamCaptureStatusActive) return cudaErrorStreamCaptureUnsupported;
  // Within one capture the stream's handle names it (it cannot be destroyed
  // and reused while it captures); cuStreamGetId on a capturing stream is
  // refused under global capture (error 900 on the H100).
  const auto stream_key = reinterpret_cast<std::uintptr_t>(stream);

  RelaxedMode relaxed(driver_);
  void* reused = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    end_captures_on_locked(stream, info.id);  // an earlier capture on this stream is over
    cudaError_t error = cudaSuccess;
    Graph* graph = graph_for(info, stream, &error);
    if (graph == nullptr) return error;
    if (!graph->allocated) {
      graph->allocated = true;
      join_named_group_locked(*graph, stream_key);  // its first allocation: the group named for this stream
    }
    if (graph->group != nullptr) {
      // A block of its share group: freed by another member, or earlier in this capture on this stream.
      reused = take_shared_locked(*graph, stream_key, bytes);
    } else if (auto lists = graph->reusable.find(stream_key); lists != graph->reusable.end()) {
      // A block freed earlier in this capture on this stream: the smallest that fits.
      auto fit = lists->second.lower_bound(bytes);
      if (fit != lists->second.end()) {
        reused = fit->second;
        lists->second.erase(fit);
        blocks_[reused].live = true;
      }
    }
  }
  if (reused != nullptr) {
    // The pool counts the block at this allocation's size from now on (used
    // bytes are requested bytes), outside the lock (the source takes its own).
    source_.requested(reused, bytes);
    *ptr = reused;
    return cudaSuccess;
  }
  // New memory from the pool, outside the lock (the pool's allocate may
  // collect released graphs, which takes it).
  void* block = nullptr;
  if (cudaError_t e = source_.take(bytes, &block); e != cudaSuccess) return e;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graphs_.find(info.id);
  try {
    if (it == graphs_.end()) throw std::bad_alloc();  // released meanwhile: cannot be (still capturing)
    it->second->blocks.reserve(it->second->blocks.size() + 1);
    blocks_.emplace(block, BlockInfo{it->second.get(), bytes, true, false});
    it->second->blocks.push_back(block);
  } catch (...) {
    blocks_.erase(block);
    source_.give_back(std::vector<void*>{block});  // nothing used it
    return cudaErrorMemoryAllocation;
  }
  held_blocks_.fetch_add(1, std::memory_order_relaxed);
  held_bytes_ += bytes;
  held_bytes_high_ = std::max(held_bytes_high_, held_bytes_);
  *ptr = block;
  return cudaSuccess;
}

bool GraphMemory::deallocate(void* ptr, cudaStream_t stream, void* freer, cudaError_t* result) noexcept {
  if (held_blocks_.load(std::memory_order_relaxed) == 0) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (blocks_.find(ptr) == blocks_.end()) return false;
  }
  // The stream's capture, asked outside the lock (a driver call).
  CaptureInfo info;
  const auto stream_key = reinterpret_cast<std::uintptr_t>(stream);  // as in allocate
  cudaError_t e = driver_.stream_capture_info(stream, &info);
  // Under another capture, graph_for may tie that capture's graph: as in allocate.
  std::optional<RelaxedMode> relaxed;
  if (e == cudaSuccess && info.status == cudaStreamCaptureStatusActive) relaxed.emplace(driver_);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  if (it == blocks_.end()) return false;  // released meanwhile: the pool's again, and judges the free
  BlockInfo& b = it->second;
  if (e != cudaSuccess) {
    *result = e;
    return true;
  }
  end_captures_on_locked(stream, info.status == cudaStreamCaptureStatusNone ? 0 : info.id);
  if (info.status == cudaStreamCaptureStatusInvalidated) {
    *result = cudaErrorStreamCaptureInvalidated;  // this capture or another: nothing can be recorded
    return true;
  }
  if (!b.live || b.caller_freed) {
    *result = cudaErrorInvalidValue;  // freed already
    return true;
  }
  const bool capturing = info.status == cudaStreamCaptureStatusActive;
  if (capturing && b.graph != nullptr && info.id == b.graph->capture_id) {
    // A free node: later allocations of this capture on this stream may
    // reuse it, and, in a share group, those of the other members.
    if (b.graph->group != nullptr) {
      if (!give_to_group_locked(*b.graph, b, ptr, info.id, stream_key)) {
        *result = cudaErrorMemoryAllocation;
        return true;
      }
    } else {
      try {
        b.graph->reusable[stream_key].emplace(b.bytes, ptr);
      } catch (...) {
        *result = cudaErrorMemoryAllocation;
        return true;
      }
    }
    b.live = false;
  } else if (capturing) {
    // A free node of another capture: its launches use the block before the
    // free, so its graph holds the block too.
    cudaError_t error = cudaSuccess;
    Graph* other = graph_for(info, stream, &error);
    if (other == nullptr) {
      *result = error;
      return true;
    }
    try {
      other->blocks.push_back(ptr);
    } catch (...) {
      *result = cudaErrorMemoryAllocation;  // `other` stays registered: released later, holding nothing
      return true;
    }
    b.freed_in = other;
    b.caller_freed = true;
  } else {
    // Final for the caller; the memory stays with the graph, and goes back,
    // once it is released, as a free on this stream.
    b.caller_freed = true;
    b.freed_eagerly = true;
    b.freed_on = freer;
  }
  *result = cudaSuccess;
  return true;
}

void GraphMemory::release_locked(Graph& graph, std::vector<void*>& complete,
                                 std::vector<std::pair<void*, void*>>& freed_on) noexcept {
  for (void* block : graph.blocks) {
    auto it = blocks_.find(block);
    if (it == blocks_.end()) continue;
    BlockInfo& b = it->second;
    if (b.graph == &graph) {
      b.graph = nullptr;
      if (b.freed_in != nullptr) continue;  // the graph that captured the caller's free still holds it
    } else if (b.freed_in == &graph) {
      b.freed_in = nullptr;
      if (b.graph != nullptr) continue;  // the graph that allocated it still holds it
    } else {
      continue;
    }
    if (b.group != nullptr) continue;  // its share group holds it (release_group_locked)
    retire_locked(it, complete, freed_on);
  }
}

void GraphMemory::retire_locked(std::unordered_map<void*, BlockInfo>::iterator it, std::vector<void*>& complete,
                                std::vector<std::pair<void*, void*>>& freed_on) noexcept {
  // No graph holds it any more. Allocated in a graph and freed neither in
  // it nor since: the caller's still, as cudaMallocAsync's are once their
  // graph is gone. It stays allocated in the pool, an ordinary block its
  // owner frees.
  void* const block = it->first;
  const BlockInfo& b = it->second;
  const bool callers = b.live && !b.caller_freed;
  const bool eager = b.freed_eagerly;
  void* const freer = b.freed_on;
  held_bytes_ -= b.bytes;
  blocks_.erase(it);
  held_blocks_.fetch_sub(1, std::memory_order_relaxed);
  if (callers) return;
  try {
    if (eager) {
      freed_on.emplace_back(block, freer);
    } else {
      complete.push_back(block);  // freed in a graph: every launch that used it is done
    }
  } catch (...) {
    // Cannot list it: it stays out of the pool (a leak, never an early reuse).
  }
}

void GraphMemory::collect() noexcept {
  std::lock_guard<std::mutex> collecting(collect_mu_);
  std::vector<unsigned long long> released;
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    released.swap(inbox_->released);
  }
  // `pending` stays set until the blocks are back: a caller that sees it
  // collects, and so waits here for this collect to finish.
  std::vector<void*> complete;
  std::vector<std::pair<void*, void*>> freed_on;
  if (!released.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (unsigned long long id : released) {
      auto it = graphs_.find(id);
      if (it == graphs_.end()) continue;
      release_locked(*it->second, complete, freed_on);
      leave_group_locked(*it->second, complete, freed_on);
      end_capture_locked(*it->second);
      graphs_.erase(it);  // release_locked left no block naming it
      ++released_graphs_;
    }
  }
  if (!complete.empty()) source_.give_back(complete);
  for (const auto& [block, freer] : freed_on) source_.give_back_freed_on(block, freer);
  std::lock_guard<std::mutex> lock(inbox_->mu);
  inbox_->pending.store(!inbox_->released.empty(), std::memory_order_release);
}

void GraphMemory::end_capture_locked(Graph& graph) noexcept {
  if (graph.capture_ended) return;
  graph.capture_ended = true;
  graph.reusable.clear();  // no later allocation of that capture can come
  open_captures_.fetch_sub(1, std::memory_order_relaxed);
}

void GraphMemory::end_captures_on_locked(cudaStream_t stream, unsigned long long still_open) noexcept {
  if (open_captures_.load(std::memory_order_relaxed) == 0) return;
  for (auto& [id, graph] : graphs_) {
    if (graph->stream == stream && id != still_open) end_capture_locked(*graph);
  }
}

void GraphMemory::outside_capture_slow(cudaStream_t stream) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  end_captures_on_locked(stream, 0);
}

GraphMemoryStats GraphMemory::stats() noexcept {
  if (has_released()) collect();
  std::lock_guard<std::mutex> lock(mu_);
  GraphMemoryStats s;
  s.held_bytes = held_bytes_;
  s.held_bytes_high = held_bytes_high_;
  s.held_blocks = blocks_.size();
  s.graphs = graphs_.size();
  s.released_graphs = released_graphs_;
  return s;
}

GraphMemorySnapshot GraphMemory::snapshot() noexcept {
  if (has_released()) collect();
  std::lock_guard<std::mutex> lock(mu_);
  GraphMemorySnapshot out;
  out.reserve(graphs_.size());
  for (const auto& [id, graph] : graphs_) {
    GraphHolding h;
    h.capture_id = id;
    h.capturing = !graph->capture_ended;
    for (void* block : graph->blocks) {
      const auto it = blocks_.find(block);
      if (it == blocks_.end()) continue;
      const BlockInfo& info = it->second;
      h.held_bytes += info.bytes;
      ++h.held_blocks;
      if (info.graph == graph.get() && info.live) {
        h.output_bytes += info.bytes;
        ++h.output_blocks;
      }
    }
    out.push_back(h);
  }
  return out;
}

void GraphMemory::reset_high() noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  held_bytes_high_ = held_bytes_;
}

}  // namespace sova::detail
