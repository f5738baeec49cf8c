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
//   from sova's segment pool (sova_torch_malloc_pool_segment: capture-safe,
//   see graph_hooks.hpp), apart from the device's pool.
// - torch.cuda.memory_stats() counts as PyTorch's allocator does: sova's
//   blocks at PyTorch's rounded sizes, small (<= 1 MiB) or large, and the
//   private pools as PyTorch's allocator counts them (getDeviceStats). sova's
//   reserved memory and chunks have no small/large split: they count in "all"
//   only, the per-pool reserved and segment figures are the private pools'.
// - set_per_process_memory_fraction: sova's limit (sova_torch_set_memory_fraction)
//   counts sova's pools and the private pools; allocations routed to a private
//   pool are held by PyTorch's own limit, set to what sova leaves; a sova
//   allocation out of memory falls back on the pools marked use_on_oom, as
//   PyTorch's allocator does.
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

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <unordered_map>
#include <vector>

namespace sova_native {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;
/// c10's Stat (current, peak, allocated, freed), named through DeviceStats so
/// that the namespace PyTorch declares it in does not matter.
using Stat = std::remove_reference_t<decltype(std::declval<DeviceStats&>().allocation[0])>;

/// What a free of a sova block needs (sova_torch_free's arguments).
struct SovaBlock {
  size_t size;
  cudaStream_t stream;
  int device;
};

constexpr size_t kAll = static_cast<size_t>(StatType::AGGREGATE);
constexpr size_t kSmall = static_cast<size_t>(StatType::SMALL_POOL);
constexpr size_t kLarge = static_cast<size_t>(StatType::LARGE_POOL);
constexpr int kMaxDevices = 64;  // sova_torch's, and PyTorch's own per process

/// PyTorch's caching allocator's rounding (kMinBlockSize) and its small-pool
/// bound (kSmallSize): sova's blocks are counted at the sizes PyTorch's blocks
/// of the same request would have.
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = 1048576;
inline size_t pytorch_block_size(size_t size) {
  return size < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

/// A c10 Stat kept with atomics (current, peak, allocated, freed).
struct AtomicStat {
  std::atomic<int64_t> current{0}, peak{0}, allocated{0}, freed{0};
  void add(int64_t amount) {
    const int64_t now = current.fetch_add(amount, std::memory_order_relaxed) + amount;
    allocated.fetch_add(amount, std::memory_order_relaxed);
    int64_t p = peak.load(std::memory_order_relaxed);
    while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(int64_t amount) {
    current.fetch_sub(amount, std::memory_order_relaxed);
    freed.fetch_add(amount, std::memory_order_relaxed);
  }
  void reset_peak() { peak.store(current.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  void reset_accumulated() {
    allocated.store(0, std::memory_order_relaxed);
    freed.store(0, std::memory_order_relaxed);
  }
  Stat get() const {
    Stat out;
    out.current = current.load(std::memory_order_relaxed);
    out.peak = peak.load(std::memory_order_relaxed);
    out.allocated = allocated.load(std::memory_order_relaxed);
    out.freed = freed.load(std::memory_order_relaxed);
    return out;
  }
};

/// sova's blocks on one device, as PyTorch's statistics name them: blocks,
/// their bytes at PyTorch's sizes, the bytes asked for; all, small and large.
struct SovaCounts {
  std::array<AtomicStat, 3> blocks, bytes, requested;
  void change(size_t size, bool add) {
    const size_t rounded = pytorch_block_size(size);
    const size_t kind = rounded <= kSmallSize ? kSmall : kLarge;
    for (size_t k : {kAll, kind}) {
      if (add) {
        blocks[k].add(1);
        bytes[k].add(static_cast<int64_t>(rounded));
        requested[k].add(static_cast<int64_t>(size));
      } else {
        blocks[k].sub(1);
        bytes[k].sub(static_cast<int64_t>(rounded));
        requested[k].sub(static_cast<int64_t>(size));
      }
    }
  }
  template <class F>
  void each(F f) {
    for (auto* group : {&blocks, &bytes, &requested})
      for (AtomicStat& stat : *group) f(stat);
  }
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
      counts_[b.device].change(b.size, false);
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
    // PYTORCH_CUDA_ALLOC_CONF's per_process_memory_fraction, which PyTorch's
    // allocator read at its init, is sova's too.
    for (int device = 0; device < device_count && device < kMaxDevices; ++device) {
      const double fraction = pytorch_->getMemoryFraction(static_cast<c10::DeviceIndex>(device));
      if (fraction < 1.0) setMemoryFraction(fraction, static_cast<c10::DeviceIndex>(device));
    }
  }
  bool initialized() override { return initialized_; }
  void enable(bool value) override { enabled_ = value; }
  bool isEnabled() const override { return enabled_; }
  std::string name() override { return "sova"; }

  double getMemoryFraction(c10::DeviceIndex device) override { return sova_torch_memory_fraction(device); }
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "sova: device ", static_cast<int>(device), " out of range");
    size_t free_bytes = 0, total_bytes = 0;
    {
      c10::cuda::CUDAGuard guard(device);
      C10_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    }
    (void)free_bytes;
    try {
      sova_torch_set_memory_fraction(fraction, device);
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "sova: ", e.what());
    }
    device_total_[device].store(total_bytes, std::memory_order_relaxed);
    // PyTorch's own limit holds its pools: to what sova leaves at each routed
    // allocation while a limit is set (malloc_on), back to none without one.
    if (fraction >= 1.0) pytorch_->setMemoryFraction(1.0, device);
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
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "sova: device ", static_cast<int>(device), " out of range");
    sovaTorchStats s;
    std::memset(&s, 0, sizeof s);
    s.pool.structSize = sizeof s.pool;
    TORCH_CHECK(sova_torch_get_stats(device, &s) == 0, "sova: statistics: ", sova_torch_last_error());
    // The private pools, counted by PyTorch's allocator; their segments come
    // from sova's segment pool, apart from the device's pool.
    DeviceStats out = pytorch_->getDeviceStats(device);
    SovaCounts& c = counts_[device];
    auto plus = [](Stat& into, const Stat& more) {
      into.current += more.current;
      into.peak += more.peak;  // an upper bound of the peak of the sum
      into.allocated += more.allocated;
      into.freed += more.freed;
    };
    for (size_t k : {kAll, kSmall, kLarge}) {
      const auto blocks = c.blocks[k].get();
      const auto bytes = c.bytes[k].get();
      plus(out.allocation[k], blocks);
      plus(out.active[k], blocks);
      plus(out.allocated_bytes[k], bytes);
      plus(out.active_bytes[k], bytes);
      plus(out.requested_bytes[k], c.requested[k].get());
    }
    Stat reserved;
    reserved.current = static_cast<int64_t>(s.pool.reservedCurrent);
    reserved.peak = static_cast<int64_t>(s.pool.reservedHigh);
    plus(out.reserved_bytes[kAll], reserved);
    out.segment[kAll].current +=
        static_cast<int64_t>(s.pool.chunksMapped) - static_cast<int64_t>(s.pool.chunksUnmapped);
    out.inactive_split_bytes[kAll].current += static_cast<int64_t>(s.pool.freeBackedBytes);
    out.num_device_alloc += static_cast<int64_t>(s.pool.chunksMapped);
    out.num_device_free += static_cast<int64_t>(s.pool.chunksUnmapped);
    out.num_ooms += static_cast<int64_t>(s.numOoms);
    out.num_alloc_retries += static_cast<int64_t>(s.pool.deviceSynchronizes);
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    pytorch_->resetAccumulatedStats(device);
    if (device >= 0 && device < kMaxDevices) counts_[device].each([](AtomicStat& stat) { stat.reset_accumulated(); });
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    pytorch_->resetPeakStats(device);
    if (device >= 0 && device < kMaxDevices) counts_[device].each([](AtomicStat& stat) { stat.reset_peak(); });
    TORCH_CHECK(sova_torch_reset_peak_stats(device) == 0, "sova: resetting peaks: ", sova_torch_last_error());
  }
  /// Bytes PyTorch's private pools hold on `device` (their segments' sizes),
  /// for sova's memory limit (sova_torch_set_external_reserved_fn).
  uint64_t pools_reserved(int device) {
    const DeviceStats pools = pytorch_->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    return static_cast<uint64_t>(std::max<int64_t>(0, pools.reserved_bytes[kAll].current));
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
    std::lock_guard lock(routes_mutex_);
    auto& pools = use_on_oom_;
    for (auto it = pools.begin(); it != pools.end(); ++it)
      if (it->first == device && it->second == id) {
        pools.erase(it);
        break;
      }
    if (use) pools.emplace_back(device, id);
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
    // PyTorch's allocator's own bound and words, before any pool is asked.
    TORCH_CHECK_WITH(OutOfMemoryError, size < (size_t{1} << 60), "Tried to allocate more than 1EB memory.");
    if (C10_UNLIKELY(routes_open_.load(std::memory_order_acquire) != 0) && routed(device, stream)) {
      hold_pytorch_to_limit(device);
      return pytorch_->raw_alloc_with_stream(size, stream);
    }
    void* ptr = nullptr;
    const int err = sova_torch_try_malloc(&ptr, size, device, stream);
    if (err == cudaErrorMemoryAllocation) {
      const std::string message = sova_torch_last_error();
      if (void* fallback = from_use_on_oom_pools(size, device, stream)) return fallback;
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
    TORCH_CHECK(err == 0 && ptr != nullptr, sova_torch_last_error());
    blocks_.insert(ptr, SovaBlock{size, stream, device});
    counts_[device].change(size, true);
    return ptr;
  }

  /// While a memory limit is set, PyTorch's own limit (which counts its pools'
  /// segments) is what the limit leaves beside sova's pools.
  void hold_pytorch_to_limit(c10::DeviceIndex device) {
    const uint64_t limit = sova_torch_memory_limit(device);
    if (limit == UINT64_MAX) return;
    const size_t total = device_total_[device].load(std::memory_order_relaxed);
    if (total == 0) return;
    const uint64_t sova = sova_torch_reserved_bytes(device);
    const double left = limit > sova ? static_cast<double>(limit - sova) : 0.0;
    pytorch_->setMemoryFraction(std::min(1.0, left / static_cast<double>(total)), device);
  }

  /// As PyTorch's allocator does when its default pool is out of memory: the
  /// allocation from a pool marked use_on_oom that is still alive, or NULL.
  void* from_use_on_oom_pools(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    std::vector<c10::cuda::MempoolId_t> pools;
    {
      std::lock_guard lock(routes_mutex_);
      for (const auto& [d, id] : use_on_oom_)
        if (d == device) pools.push_back(id);
    }
    for (const c10::cuda::MempoolId_t& id : pools) {
      if (!pool_exists(device, id)) {  // released: never used again
        std::lock_guard lock(routes_mutex_);
        for (auto it = use_on_oom_.begin(); it != use_on_oom_.end(); ++it)
          if (it->first == device && it->second == id) {
            use_on_oom_.erase(it);
            break;
          }
        continue;
      }
      hold_pytorch_to_limit(device);
      const std::thread::id me = std::this_thread::get_id();
      try {
        pytorch_->beginAllocateToPool(device, id, [me, stream](cudaStream_t s) {
          return s == stream && std::this_thread::get_id() == me;
        });
      } catch (const c10::Error&) {  // e.g. that pool is being allocated to already
        continue;
      }
      void* ptr = nullptr;
      try {
        ptr = pytorch_->raw_alloc_with_stream(size, stream);
      } catch (const c10::Error&) {
        ptr = nullptr;  // that pool is full too
      }
      pytorch_->endAllocateToPool(device, id);
      pytorch_->releasePool(device, id);  // beginAllocateToPool's reference
      if (ptr != nullptr) return ptr;
    }
    return nullptr;
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
  std::vector<std::pair<c10::DeviceIndex, c10::cuda::MempoolId_t>> use_on_oom_;  // under routes_mutex_
  std::array<SovaCounts, kMaxDevices> counts_;
  std::array<std::atomic<size_t>, kMaxDevices> device_total_{};  // set with a memory fraction
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
        [](size_t size, int device, cudaStream_t stream) {
          return sova_torch_malloc_pool_segment(size, device, stream);
        },
        [](void* ptr, size_t size, int device, cudaStream_t stream) {
          sova_torch_free_pool_segment(ptr, size, device, stream);
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
    sova_torch_set_external_reserved_fn([](int device) -> uint64_t {
      try {
        return g_allocator->pools_reserved(device);
      } catch (...) {
        return 0;
      }
    });
    return 0;
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}
