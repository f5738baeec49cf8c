// sova_bench_rmm — RMM's memory resources (see rmm_allocators.hpp).
#include "rmm_allocators.hpp"

#include "size_table.hpp"

#include <rmm/aligned.hpp>
#include <rmm/mr/arena_memory_resource.hpp>
#include <rmm/mr/binning_memory_resource.hpp>
#include <rmm/mr/cuda_async_memory_resource.hpp>
#include <rmm/mr/cuda_memory_resource.hpp>
#include <rmm/mr/pool_memory_resource.hpp>
#include <rmm/version_config.hpp>

#include <sova/rmm.hpp>

#include <cuda/stream_ref>

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>

namespace sova_bench {
namespace {

constexpr std::size_t kAlignment = rmm::CUDA_ALLOCATION_ALIGNMENT;
constexpr std::int8_t kMinBinExponent = 18;  // 256 KiB, as RMM's benchmarks
constexpr std::int8_t kMaxBinExponent = 22;  // 4 MiB
constexpr std::uint64_t kKeepAll = UINT64_MAX;

SizeTable& sizes() {
  thread_local SizeTable table;
  return table;
}

template <class R>
void* allocate_from(R& mr, std::size_t bytes, cudaStream_t stream) {
  void* p = mr.allocate(cuda::stream_ref{stream}, bytes, kAlignment);
  if (p != nullptr) sizes().put(p, bytes);
  return p;
}

template <class R>
void deallocate_to(R& mr, void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return;
  mr.deallocate(cuda::stream_ref{stream}, ptr, sizes().take(ptr), kAlignment);
}

rmm::mr::pool_memory_resource make_pool() {
  return rmm::mr::pool_memory_resource(rmm::mr::cuda_memory_resource{}, 0, std::nullopt);
}

// binning_memory_resource holds a shared copy of the pool; the pool is kept
// here too, to read its size.
struct BinningStack {
  rmm::mr::pool_memory_resource pool = make_pool();
  rmm::mr::binning_memory_resource binning{pool, kMinBinExponent, kMaxBinExponent};
};

// A process-lifetime resource of type R, or why there is none. Made on first
// use; replaced by renew() (reset_peaks); never destroyed at exit, so that
// none outlives the CUDA runtime (as ../allocators.cpp).
template <class R>
struct Shared {
  std::unique_ptr<R> resource;
  std::string error;

  template <class Make>
  explicit Shared(Make make) {
    if (!have_gpu()) {
      error = "no GPU";
      return;
    }
    try {
      resource = make();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // Replaces the resource with a fresh one (after the device is idle, so
  // that no stream still uses the old one's memory). Throws when that fails,
  // and later cases then skip with the reason.
  template <class Make>
  void renew(Make make) {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    resource.reset();  // gives everything back to cudaFree
    try {
      resource = make();
    } catch (const std::exception& e) {
      error = std::string("remaking the resource failed: ") + e.what();
      throw;
    }
  }
};

auto make_sova_resource() {
  sova::PoolOptions options;
  options.driver = &sova::cuda_driver();
  options.release_threshold = kKeepAll;
  return std::make_unique<sova::RmmResource>(options);
}
auto make_pool_resource() { return std::make_unique<rmm::mr::pool_memory_resource>(make_pool()); }
auto make_arena_resource() { return std::make_unique<rmm::mr::arena_memory_resource>(rmm::mr::cuda_memory_resource{}); }
auto make_binning_resource() { return std::make_unique<BinningStack>(); }
auto make_async_resource() {
  return std::make_unique<rmm::mr::cuda_async_memory_resource>(std::nullopt, std::optional<std::size_t>{kKeepAll});
}

// Leaked on purpose (never destroyed, see Shared).
Shared<rmm::mr::pool_memory_resource>& pool_shared() {
  static auto* const s = new Shared<rmm::mr::pool_memory_resource>(make_pool_resource);
  return *s;
}
Shared<rmm::mr::arena_memory_resource>& arena_shared() {
  static auto* const s = new Shared<rmm::mr::arena_memory_resource>(make_arena_resource);
  return *s;
}
Shared<BinningStack>& binning_shared() {
  static auto* const s = new Shared<BinningStack>(make_binning_resource);
  return *s;
}
Shared<sova::RmmResource>& sova_shared() {
  static auto* const s = new Shared<sova::RmmResource>(make_sova_resource);
  return *s;
}
Shared<rmm::mr::cuda_async_memory_resource>& async_shared() {
  static auto* const s = new Shared<rmm::mr::cuda_async_memory_resource>(make_async_resource);
  return *s;
}

}  // namespace

std::string rmm_version() { return RMM_VERSION; }

std::string rmm_resources() {
  return "rmm_pool: pool_memory_resource(cuda_memory_resource, initial 0, maximum unset); "
         "rmm_arena: arena_memory_resource(cuda_memory_resource, arena size RMM's default: half the free memory "
         "when made); "
         "rmm_binning: binning_memory_resource(pool as rmm_pool's, bins 2^18..2^22 bytes); "
         "rmm_cuda_async: cuda_async_memory_resource(no initial size, release threshold UINT64_MAX); "
         "sova_rmm: sova::RmmResource(PoolOptions: release threshold UINT64_MAX, otherwise defaults)";
}

RmmPool::RmmPool() { why_not = pool_shared().error; }
void* RmmPool::allocate(std::size_t bytes, cudaStream_t stream) {
  return allocate_from(*pool_shared().resource, bytes, stream);
}
void RmmPool::deallocate(void* ptr, cudaStream_t stream) { deallocate_to(*pool_shared().resource, ptr, stream); }
void RmmPool::reset_peaks() { pool_shared().renew(make_pool_resource); }
PeakFigures RmmPool::read_peaks() { return {pool_shared().resource->pool_size(), 0}; }

RmmArena::RmmArena() { why_not = arena_shared().error; }
void* RmmArena::allocate(std::size_t bytes, cudaStream_t stream) {
  return allocate_from(*arena_shared().resource, bytes, stream);
}
void RmmArena::deallocate(void* ptr, cudaStream_t stream) { deallocate_to(*arena_shared().resource, ptr, stream); }

RmmBinning::RmmBinning() { why_not = binning_shared().error; }
void* RmmBinning::allocate(std::size_t bytes, cudaStream_t stream) {
  return allocate_from(binning_shared().resource->binning, bytes, stream);
}
void RmmBinning::deallocate(void* ptr, cudaStream_t stream) {
  deallocate_to(binning_shared().resource->binning, ptr, stream);
}
void RmmBinning::reset_peaks() { binning_shared().renew(make_binning_resource); }
PeakFigures RmmBinning::read_peaks() { return {binning_shared().resource->pool.pool_size(), 0}; }

RmmCudaAsync::RmmCudaAsync() { why_not = async_shared().error; }
void* RmmCudaAsync::allocate(std::size_t bytes, cudaStream_t stream) {
  return allocate_from(*async_shared().resource, bytes, stream);
}
void RmmCudaAsync::deallocate(void* ptr, cudaStream_t stream) { deallocate_to(*async_shared().resource, ptr, stream); }
void RmmCudaAsync::reset_peaks() { reset_driver_pool_peaks(async_shared().resource->pool_handle()); }
PeakFigures RmmCudaAsync::read_peaks() { return read_driver_pool_peaks(async_shared().resource->pool_handle()); }

SovaRmm::SovaRmm() { why_not = sova_shared().error; }
void* SovaRmm::allocate(std::size_t bytes, cudaStream_t stream) {
  return allocate_from(*sova_shared().resource, bytes, stream);
}
void SovaRmm::deallocate(void* ptr, cudaStream_t stream) { deallocate_to(*sova_shared().resource, ptr, stream); }
void SovaRmm::reset_peaks() {
  sova::Pool& pool = sova_shared().resource->pool();
  pool.trim_to(0);
  const std::uint64_t zero = 0;
  check_cuda(pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &zero), "Pool::set_attribute(ReservedMemHigh)");
  check_cuda(pool.set_attribute(cudaMemPoolAttrUsedMemHigh, &zero), "Pool::set_attribute(UsedMemHigh)");
}
PeakFigures SovaRmm::read_peaks() {
  const sova::PoolStats stats = sova_shared().resource->pool().stats();
  return {stats.reserved_high, stats.used_high};
}

}  // namespace sova_bench
