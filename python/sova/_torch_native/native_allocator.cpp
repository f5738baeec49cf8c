// sova's native PyTorch backend: a c10::cuda::CUDACachingAllocator::CUDAAllocator
// that serves PyTorch's ordinary allocations from sova and delegates private
// pools (CUDA graphs, torch.cuda.MemPool, torch.compile's cudagraph trees) to
// PyTorch's own caching allocator, whose pool segments then come from sova.
//
// Built against the installed PyTorch by python/sova/_torch_native/__init__.py
// (torch.utils.cpp_extension, on first use) and installed with
// sova_torch_native_install() before PyTorch initializes CUDA. Why a native
// backend and why this split: docs/python.md, "CUDA graphs".
//
// Contracts PyTorch relies on, and how they are kept:
// - Every DataPtr handed out has ctx == data and the deleter raw_deleter()
//   returns (sova_native_delete), also those of pool blocks and those
//   setCheckpointPoolState restores: torch._C._has_Standard_Deleter and
//   _free_And_Remove_DeleterFn, which cudagraph trees call, compare a
//   storage's deleter with raw_deleter(). The deleter tells sova's blocks (a
//   table kept here) from pool blocks (everything else: PyTorch's allocator).
// - Allocations whose stream passes the filter of an open
//   beginAllocateToPool go to PyTorch's allocator, which applies the same
//   filters and so places them in that pool.
// - A pool that PyTorch's allocator creates on our behalf gets its segments
//   from sova (sova_torch_malloc_segment: capture-safe, see graph_hooks.hpp).
#include <sova_torch.h>

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace sova_native {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

/// What a free of a sova block needs (sova_torch_free's arguments).
struct SovaBlock {
  size_t size;
  cudaStream_t stream;
  int device;
};

/// Live sova blocks by address, split in shards to keep the lock per
/// allocation short when many threads allocate.
class BlockTable {
 public:
  void insert(void* ptr, const SovaBlock& block) {
    Shard& s = shard(ptr);
    std::lock_guard lock(s.mutex);
    s.blocks.emplace(ptr, block);
  }
  /// Removes `ptr`'s entry into *out; false when `ptr` is not a sova block.
  bool take(void* ptr, SovaBlock* out) {
    Shard& s = shard(ptr);
    std::lock_guard lock(s.mutex);
    const auto it = s.blocks.find(ptr);
    if (it == s.blocks.end()) return false;
    *out = it->second;
    s.blocks.erase(it);
    return true;
  }
  bool find(void* ptr, SovaBlock* out) {
    Shard& s = shard(ptr);
    std::lock_guard lock(s.mutex);
    const auto it = s.blocks.find(ptr);
    if (it == s.blocks.end()) return false;
    *out = it->second;
    return true;
  }

 private:
  struct Shard {
    std::mutex mutex;
    std::unordered_map<void*, SovaBlock> blocks;
  };
  static constexpr size_t kShards = 16;
  Shard& shard(void* ptr) { return shards_[(reinterpret_cast<uintptr_t>(ptr) >> 9) % kShards]; }
  std::array<Shard, kShards> shards_;
};

void sova_native_delete(void* ptr);

class SovaAllocator final : public cca::CUDAAllocator {
 public:
  SovaAllocator(cca::CUDAAllocator* pytorch, std::shared_ptr<cca::CUDAAllocator> segments)
      : pytorch_(pytorch), segments_(std::move(segments)) {}

  // ---- allocation ----------------------------------------------------------
  c10::DataPtr allocate(size_t size) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    void* ptr = malloc_on(size, device, stream);
    return {ptr, ptr, &sova_native_delete, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &sova_native_delete; }
  void* raw_alloc(size_t size) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return malloc_on(size, device, c10::cuda::getCurrentCUDAStream(device).stream());
  }
  void* raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
    c10::DeviceIndex device = -1;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return malloc_on(size, device, stream);
  }
  void raw_delete(void* ptr) override {
    if (ptr == nullptr) return;
    SovaBlock b{};
    if (blocks_.take(ptr, &b)) {
      sova_torch_free(ptr, b.size, b.device, b.stream);  // never throws
      return;
    }
    pytorch_->raw_delete(ptr);  // a pool block
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // ---- set-up --------------------------------------------------------------
  void init(int device_count) override {
    pytorch_->init(device_count);
    device_count_ = device_count;
    initialized_ = true;
  }
  bool initialized() override { return initialized_; }
  void enable(bool value) override { enabled_ = value; }
  bool isEnabled() const override { return enabled_; }
  std::string name() override { return "sova"; }

  double getMemoryFraction(c10::DeviceIndex) override { return 1.0; }
  void setMemoryFraction(double, c10::DeviceIndex) override {
    TORCH_CHECK(false,
                "sova: set_per_process_memory_fraction is not supported; limit sova's pool "
                "with sova.torch.enable(max_size=...)");
  }
  std::vector<cca::StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex) override { return {}; }

  // ---- streams -------------------------------------------------------------
  using cca::CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& data, c10::cuda::CUDAStream stream) override {
    void* ptr = data.get();
    if (ptr == nullptr) return;
    SovaBlock b{};
    if (blocks_.find(ptr, &b)) {
      TORCH_CHECK(sova_torch_record_stream(ptr, stream.stream()) == 0,
                  "sova: record_stream: ", sova_torch_last_error());
      return;
    }
    // A pool block: PyTorch's allocator ignores DataPtrs without its own
    // deleter, so it is shown one for the call.
    c10::DataPtr alias(ptr, ptr, pytorch_->raw_deleter(), data.device());
    pytorch_->recordStream(alias, stream);
    (void)alias.release_context();
  }

  // ---- statistics and cache ------------------------------------------------
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    sovaTorchStats s;
    std::memset(&s, 0, sizeof s);
    s.pool.structSize = sizeof s.pool;
    TORCH_CHECK(sova_torch_get_stats(device, &s) == 0, "sova: statistics: ", sova_torch_last_error());
    const DeviceStats pools = pytorch_->getDeviceStats(device);
    constexpr auto kAll = static_cast<size_t>(StatType::AGGREGATE);
    // Pool segments are sova allocations: count the pools' blocks instead.
    const int64_t pool_segments = pools.reserved_bytes[kAll].current;
    const int64_t used = static_cast<int64_t>(s.pool.usedCurrent) - pool_segments + pools.allocated_bytes[kAll].current;
    DeviceStats out;
    for (auto* stat : {&out.allocated_bytes, &out.active_bytes, &out.requested_bytes}) {
      (*stat)[kAll].current = used;
      (*stat)[kAll].peak = static_cast<int64_t>(s.pool.usedHigh);  // an upper bound
      (*stat)[kAll].allocated = static_cast<int64_t>(s.bytesAllocated);
      (*stat)[kAll].freed = static_cast<int64_t>(s.bytesFreed);
    }
    out.reserved_bytes[kAll].current = static_cast<int64_t>(s.pool.reservedCurrent);
    out.reserved_bytes[kAll].peak = static_cast<int64_t>(s.pool.reservedHigh);
    const int64_t live =
        static_cast<int64_t>(s.pool.liveBlocks) - pools.segment[kAll].current + pools.allocation[kAll].current;
    for (auto* stat : {&out.allocation, &out.active}) {
      (*stat)[kAll].current = live;
      (*stat)[kAll].peak = static_cast<int64_t>(s.liveBlocksPeak);
    }
    out.segment[kAll].current = static_cast<int64_t>(s.pool.chunksMapped) - static_cast<int64_t>(s.pool.chunksUnmapped);
    out.num_device_alloc = static_cast<int64_t>(s.pool.chunksMapped);
    out.num_device_free = static_cast<int64_t>(s.pool.chunksUnmapped);
    out.inactive_split_bytes[kAll].current = static_cast<int64_t>(s.pool.freeBackedBytes);
    out.num_ooms = static_cast<int64_t>(s.numOoms) + pools.num_ooms;
    out.num_alloc_retries = static_cast<int64_t>(s.pool.deviceSynchronizes) + pools.num_alloc_retries;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { pytorch_->resetAccumulatedStats(device); }
  void resetPeakStats(c10::DeviceIndex device) override {
    pytorch_->resetPeakStats(device);
    TORCH_CHECK(sova_torch_reset_peak_stats(device) == 0, "sova: resetting peaks: ", sova_torch_last_error());
  }
  void emptyCache(c10::cuda::MempoolId_t mempool_id) override {
    pytorch_->emptyCache(mempool_id);  // frees unused pool segments back to sova
    if (mempool_id.first != 0 || mempool_id.second != 0) return;
    for (int device = 0; device < device_count_; ++device)
      if (sova_torch_pool(device) != nullptr) (void)sova_torch_empty_cache(device);
  }
  void cacheInfo(c10::DeviceIndex device, size_t* largest_block) override {
    // cuDNN's benchmark mode sizes workspaces by this: what sova can hand out
    // at once, its largest free block or the device's free memory.
    sovaTorchStats s;
    std::memset(&s, 0, sizeof s);
    s.pool.structSize = sizeof s.pool;
    size_t largest = 0;
    if (sova_torch_get_stats(device, &s) == 0) largest = s.pool.largestFreeBlock;
    size_t free_bytes = 0, total_bytes = 0;
    {
      c10::cuda::CUDAGuard guard(device);
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess && free_bytes > largest)
        largest = free_bytes;
      else
        (void)cudaGetLastError();
    }
    *largest_block = largest;
  }
  void* getBaseAllocation(void* ptr, size_t* size) override {
    SovaBlock b{};
    if (blocks_.find(ptr, &b)) {
      if (size != nullptr) *size = b.size;
      return ptr;
    }
    return pytorch_->getBaseAllocation(ptr, size);
  }

  // ---- snapshots and history: PyTorch's, covering the pools; sova's own
  // ---- blocks are in sova.torch.snapshot() -----------------------------------
  cca::SnapshotInfo snapshot(c10::cuda::MempoolId_t mempool_id, bool include_traces) override {
    return pytorch_->snapshot(mempool_id, include_traces);
  }
  bool isHistoryEnabled() override { return pytorch_->isHistoryEnabled(); }
  void recordHistory(bool enabled, cca::CreateContextFn recorder, size_t max_entries, cca::RecordContext when,
                     bool clear_history, const std::vector<std::string>& skip_actions) override {
    pytorch_->recordHistory(enabled, recorder, max_entries, when, clear_history, skip_actions);
  }
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>>& md) override {
    pytorch_->recordAnnotation(md);
  }
  void pushCompileContext(std::string& md) override { pytorch_->pushCompileContext(md); }
  void popCompileContext() override { pytorch_->popCompileContext(); }
  void setUserMetadata(const std::string& md) override { pytorch_->setUserMetadata(md); }
  std::string getUserMetadata() override { return pytorch_->getUserMetadata(); }
  void attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) override {
    pytorch_->attachOutOfMemoryObserver(std::move(observer));
  }
  void attachAllocatorTraceTracker(cca::AllocatorTraceTracker tracker) override {
    pytorch_->attachAllocatorTraceTracker(std::move(tracker));
  }

  // ---- private pools: PyTorch's allocator, segments from sova --------------
  void beginAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                           std::function<bool(cudaStream_t)> filter) override {
    const bool created = ensure_pool(device, id);
    try {
      pytorch_->beginAllocateToPool(device, id, filter);
    } catch (...) {  // e.g. already recording to that pool: nothing changes
      if (created) pytorch_->releasePool(device, id);
      throw;
    }
    if (created) pytorch_->releasePool(device, id);  // keep only beginAllocateToPool's reference
    std::lock_guard lock(routes_mutex_);
    routes_.push_back(Route{device, id, std::move(filter)});
    routes_open_.store(routes_.size(), std::memory_order_release);
  }
  void endAllocateToPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    pytorch_->endAllocateToPool(device, id);
    std::lock_guard lock(routes_mutex_);
    for (auto it = routes_.begin(); it != routes_.end(); ++it)
      if (it->device == device && it->id == id) {
        routes_.erase(it);
        break;
      }
    routes_open_.store(routes_.size(), std::memory_order_release);
  }
  void releasePool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override { pytorch_->releasePool(device, id); }
  int getPoolUseCount(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    return pytorch_->getPoolUseCount(device, id);
  }
  void createOrIncrefPool(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                          std::shared_ptr<cca::CUDAAllocator> allocator) override {
    // A pool that exists already is shared: PyTorch's allocator then wants no allocator.
    if (allocator == nullptr && !pool_exists(device, id)) allocator = segments_;
    pytorch_->createOrIncrefPool(device, id, std::move(allocator));
  }
  void setUseOnOOM(c10::DeviceIndex device, c10::cuda::MempoolId_t id, bool use) override {
    pytorch_->setUseOnOOM(device, id, use);
  }
  void setNoSplit(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override { pytorch_->setNoSplit(device, id); }
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::cuda::MempoolId_t id,
                                const std::unordered_set<void*>& expected) override {
    return pytorch_->checkPoolLiveAllocations(device, id, expected);
  }
  std::shared_ptr<cca::AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::cuda::MempoolId_t id) override {
    return pytorch_->getCheckpointState(device, id);
  }
  cca::CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device,
                                              std::shared_ptr<cca::AllocatorState> state) override {
    cca::CheckpointDelta delta = pytorch_->setCheckpointPoolState(device, std::move(state));
    for (c10::DataPtr& data : delta.dataptrs_allocd) {  // ours: see the file's comment
      void* ptr = data.get();
      const c10::Device where = data.device();
      (void)data.release_context();
      data = c10::DataPtr(ptr, ptr, &sova_native_delete, where);
    }
    return delta;
  }

  // ---- peers and IPC -------------------------------------------------------
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override {
    pytorch_->enablePeerAccess(dev, dev_to_access);
    if (sovaMemPool_t pool = sova_torch_pool(dev)) {
      cudaMemAccessDesc desc{};
      desc.location.type = cudaMemLocationTypeDevice;
      desc.location.id = dev_to_access;
      desc.flags = cudaMemAccessFlagsProtReadWrite;
      if (sovaMemPoolSetAccess(pool, &desc, 1) != cudaSuccess) {  // memcpyAsync copies as peers
        TORCH_WARN_ONCE("sova: cannot give device ", static_cast<int>(dev_to_access), " access to the pool of device ",
                        static_cast<int>(dev), ": ", sovaGetLastErrorMessage());
      }
    }
  }
  cudaError_t memcpyAsync(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                          bool p2p_enabled) override {
    // sova's memory is VMM memory: another device reaches it only where the
    // pool granted access (enablePeerAccess, once the pool exists), which a
    // peer copy does not need; it uses peer-to-peer where the devices can.
    (void)p2p_enabled;
    if (dst_device == src_device) return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, count, stream);
  }
  cca::ShareableHandle shareIpcHandle(void*) override {
    TORCH_CHECK(false,
                "sova's PyTorch backend does not share CUDA tensors between processes "
                "(torch.multiprocessing CUDA IPC) yet");
  }
  std::shared_ptr<void> getIpcDevPtr(std::string) override {
    TORCH_CHECK(false, "sova's PyTorch backend does not open CUDA IPC handles yet");
  }

 private:
  struct Route {
    c10::DeviceIndex device;
    c10::cuda::MempoolId_t id;
    std::function<bool(cudaStream_t)> filter;
  };

  void* malloc_on(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    if (size == 0) return nullptr;
    if (C10_UNLIKELY(routes_open_.load(std::memory_order_acquire) != 0) && routed(device, stream))
      return pytorch_->raw_alloc_with_stream(size, stream);
    void* ptr = nullptr;
    const int err = sova_torch_try_malloc(&ptr, size, device, stream);
    if (err == cudaErrorMemoryAllocation) TORCH_CHECK_WITH(OutOfMemoryError, false, sova_torch_last_error());
    TORCH_CHECK(err == 0 && ptr != nullptr, sova_torch_last_error());
    blocks_.insert(ptr, SovaBlock{size, stream, device});
    return ptr;
  }

  /// Whether an open beginAllocateToPool claims allocations on `stream`.
  bool routed(c10::DeviceIndex device, cudaStream_t stream) {
    std::lock_guard lock(routes_mutex_);
    for (const Route& r : routes_)
      if (r.device == device && r.filter(stream)) return true;
    return false;
  }

  bool pool_exists(c10::DeviceIndex device, c10::cuda::MempoolId_t id) {
    try {
      return pytorch_->getPoolUseCount(device, id) > 0;
    } catch (const c10::Error&) {  // no such pool
      return false;
    }
  }
  /// Creates the pool with sova segments when PyTorch's allocator has none of
  /// that id; true if it did (the caller then holds one extra reference).
  bool ensure_pool(c10::DeviceIndex device, c10::cuda::MempoolId_t id) {
    if (pool_exists(device, id)) return false;
    pytorch_->createOrIncrefPool(device, id, segments_);
    return true;
  }

  cca::CUDAAllocator* pytorch_;                   // PyTorch's caching allocator
  std::shared_ptr<cca::CUDAAllocator> segments_;  // pool segments from sova
  BlockTable blocks_;
  std::mutex routes_mutex_;
  std::vector<Route> routes_;  // under routes_mutex_
  std::atomic<size_t> routes_open_{0};
  int device_count_ = 0;
  bool initialized_ = false;
  bool enabled_ = true;
};

// Set once by install and never destroyed: tensors may be freed during the
// process's exit, after static destructors ran.
SovaAllocator* g_allocator = nullptr;

void sova_native_delete(void* ptr) { g_allocator->raw_delete(ptr); }

}  // namespace sova_native

/// Makes sova PyTorch's CUDA allocator (see the file's comment). Must run
/// before PyTorch initializes CUDA. Returns 0, or -1 with a message in
/// `message` (capacity `capacity`); nothing changes on failure.
extern "C" __attribute__((visibility("default"))) int sova_torch_native_install(char* message, size_t capacity) {
  using namespace sova_native;
  auto fail = [&](const std::string& m) {
    if (capacity > 0) std::snprintf(message, capacity, "%s", m.c_str());
    return -1;
  };
  try {
    if (g_allocator != nullptr) return 0;
    cca::CUDAAllocator* pytorch = cca::allocator.load();
    if (pytorch == nullptr) return fail("PyTorch has no CUDA allocator to delegate pools to");
    if (pytorch->initialized())
      return fail(
          "PyTorch has initialized CUDA already: call sova.torch.enable() before the first "
          "CUDA tensor");
    if (pytorch->name() != "native")
      return fail("PyTorch's allocator backend is '" + pytorch->name() +
                  "'; sova's native backend delegates graph pools to the 'native' one");
    auto segments = torch::cuda::CUDAPluggableAllocator::createCustomAllocator(
        [](size_t size, int device, cudaStream_t stream) { return sova_torch_malloc_segment(size, device, stream); },
        [](void* ptr, size_t size, int device, cudaStream_t stream) {
          sova_torch_free_segment(ptr, size, device, stream);
        });
    auto* keep = new std::shared_ptr<SovaAllocator>(
        std::make_shared<SovaAllocator>(pytorch, std::move(segments)));  // never deleted
    g_allocator = keep->get();
    try {
      torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(*keep);
    } catch (...) {
      g_allocator = nullptr;
      throw;
    }
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
