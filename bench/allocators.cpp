// sova benchmarks — the allocators under test (see allocators.hpp).
#include "allocators.hpp"
#include "pool_attributes.hpp"

#include "capi/stats_fields.hpp"

#include <cstdint>
#include <exception>

namespace sova_bench {
namespace {

constexpr std::uint64_t kKeepAll = UINT64_MAX;  // release threshold of every pool here

// A process-lifetime sova::Pool on `driver`, or why there is none.
struct SharedPool {
  sova::Pool* pool = nullptr;
  std::string error;
};

// `options` as given, but for its driver and release threshold.
SharedPool make_warm_pool(sova::Driver& driver, sova::PoolOptions options = {}) {
  SharedPool shared;
  try {
    options.release_threshold = kKeepAll;
    options.driver = &driver;
    shared.pool = new sova::Pool(options);  // never deleted, see allocators.hpp
  } catch (const std::exception& e) {
    shared.error = e.what();
  }
  return shared;
}

// Trims a sova pool to nothing cached and resets its high-water marks.
void reset_pool_peaks(sova::Pool& pool) {
  pool.trim_to(0);
  const std::uint64_t zero = 0;
  check_cuda(pool.set_attribute(cudaMemPoolAttrReservedMemHigh, &zero), "Pool::set_attribute(ReservedMemHigh)");
  check_cuda(pool.set_attribute(cudaMemPoolAttrUsedMemHigh, &zero), "Pool::set_attribute(UsedMemHigh)");
}

PeakFigures read_pool_peaks(const sova::Pool& pool) {
  const sova::PoolStats stats = pool.stats();
  return {stats.reserved_high, stats.used_high};
}

// Empties one of the driver's pools (cudaMemPoolTrimTo keeps memory under
// frees whose completion the host has not seen, so wait for the device
// first); returns the bytes it still reserves.
std::uint64_t trim_driver_pool(cudaMemPool_t pool) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return kDriverPoolApi.trim(pool);
}

// Runs `set_up` and turns what it throws into `why_not`.
template <class F>
void try_set_up(std::string& why_not, F&& set_up) {
  try {
    set_up();
  } catch (const std::exception& e) {
    why_not = e.what();
  }
}

}  // namespace

CudaMalloc::CudaMalloc() {
  if (!have_gpu()) why_not = "no GPU";
}
void* CudaMalloc::allocate(std::size_t bytes, cudaStream_t) {
  void* p = nullptr;
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void CudaMalloc::deallocate(void* ptr, cudaStream_t) { check_cuda(cudaFree(ptr), "cudaFree"); }

CudaAsyncDefault::CudaAsyncDefault() {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  // Set on every construction: the seed cases set this same pool's threshold too.
  try_set_up(why_not, [] {
    cudaMemPool_t pool = nullptr;
    check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = kKeepAll;
    check_cuda(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
               "cudaMemPoolSetAttribute(ReleaseThreshold)");
  });
}
void* CudaAsyncDefault::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  check_cuda(cudaMallocAsync(&p, bytes, stream), "cudaMallocAsync");
  return p;
}
void CudaAsyncDefault::deallocate(void* ptr, cudaStream_t stream) {
  check_cuda(cudaFreeAsync(ptr, stream), "cudaFreeAsync");
}

std::uint64_t CudaAsyncDefault::trim() {
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  return trim_driver_pool(pool);
}

void CudaAsyncDefault::reset_peaks() {
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  reset_driver_pool_peaks(pool);
}
PeakFigures CudaAsyncDefault::read_peaks() {
  cudaMemPool_t pool = nullptr;
  check_cuda(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
  return read_driver_pool_peaks(pool);
}

CudaAsyncPool::CudaAsyncPool() {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  static const struct Shared {
    cudaMemPool_t pool = nullptr;
    std::string error;
  } shared = [] {
    Shared s;
    try_set_up(s.error, [&s] {
      cudaMemPoolProps props{};
      props.allocType = cudaMemAllocationTypePinned;
      props.location.type = cudaMemLocationTypeDevice;
      props.location.id = 0;
      check_cuda(cudaMemPoolCreate(&s.pool, &props), "cudaMemPoolCreate");  // never destroyed
      std::uint64_t keep = kKeepAll;
      check_cuda(cudaMemPoolSetAttribute(s.pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 "cudaMemPoolSetAttribute(ReleaseThreshold)");
    });
    return s;
  }();
  pool = shared.pool;
  why_not = shared.error;
}
void* CudaAsyncPool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  check_cuda(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync");
  return p;
}
void CudaAsyncPool::deallocate(void* ptr, cudaStream_t stream) {
  check_cuda(cudaFreeAsync(ptr, stream), "cudaFreeAsync");
}
std::uint64_t CudaAsyncPool::trim() { return trim_driver_pool(pool); }

SovaCapi::SovaCapi() : sim(capi_sim()) {
  if (sim != nullptr) label = "sim";
  // Set on every construction: the seed cases set this same pool's threshold too.
  try_set_up(why_not, [this] {
    check_cuda(sovaDeviceGetMemPool(&pool, 0), "sovaDeviceGetMemPool");
    std::uint64_t keep = kKeepAll;
    check_cuda(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
               "sovaMemPoolSetAttribute(ReleaseThreshold)");
  });
}
void* SovaCapi::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  check_cuda(sovaMallocAsync(&p, bytes, stream), "sovaMallocAsync");
  return p;
}
void SovaCapi::deallocate(void* ptr, cudaStream_t stream) { check_cuda(sovaFreeAsync(ptr, stream), "sovaFreeAsync"); }

SovaCapiUnchecked::SovaCapiUnchecked() {
  // One process-lifetime pool, as with the other allocators.
  static sovaMemPool_t unchecked = nullptr;
  try_set_up(why_not, [this] {
    if (unchecked == nullptr) {
      sovaMemPoolProps props{};
      props.device = 0;
      props.flags = sovaMemPoolNoStreamChecks;
      check_cuda(sovaMemPoolCreate(&unchecked, &props), "sovaMemPoolCreate");
      std::uint64_t keep = kKeepAll;
      check_cuda(sovaMemPoolSetAttribute(unchecked, cudaMemPoolAttrReleaseThreshold, &keep),
                 "sovaMemPoolSetAttribute(ReleaseThreshold)");
    }
    pool = unchecked;
  });
}

void* SovaCapiFromPool::allocate(std::size_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  check_cuda(sovaMallocFromPoolAsync(&p, bytes, pool, stream), "sovaMallocFromPoolAsync");
  return p;
}

sova::PoolStats SovaCapi::pool_stats() const {
  sovaMemPoolStats c{};
  c.structSize = sizeof c;
  check_cuda(sovaMemPoolGetStats(pool, &c), "sovaMemPoolGetStats");
  sova::PoolStats s;
#define SOVA_COPY_FROM_C(c_field, cpp_field) s.cpp_field = c.c_field;
  SOVA_POOL_STATS_FIELDS(SOVA_COPY_FROM_C)
#undef SOVA_COPY_FROM_C
  return s;
}

std::uint64_t SovaCapi::trim() { return kSovaPoolApi.trim(pool); }
void SovaCapi::reset_peaks() { kSovaPoolApi.reset_peaks(pool); }
PeakFigures SovaCapi::read_peaks() { return kSovaPoolApi.read_peaks(pool); }

SovaPool::SovaPool() {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  static const SharedPool shared = make_warm_pool(sova::cuda_driver());
  pool = shared.pool;
  why_not = shared.error;
}

void SovaPool::reset_peaks() { reset_pool_peaks(*pool); }

SovaPoolUnchecked::SovaPoolUnchecked() : SovaPool(NoPool{}) {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  static const SharedPool shared = make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.check_streams = false});
  pool = shared.pool;
  why_not = shared.error;
}
PeakFigures SovaPool::read_peaks() { return read_pool_peaks(*pool); }

namespace {
// The shared pool of one policy variant on the GPU: made by `make` on first
// use (one static per lambda type, so per variant).
template <class Make>
void use_variant(SovaPool& a, Make make) {
  if (!have_gpu()) {
    a.why_not = "no GPU";
    return;
  }
  static const SharedPool shared = make();
  a.pool = shared.pool;
  a.why_not = shared.error;
}
}  // namespace

SovaPoolSizeClasses::SovaPoolSizeClasses() : SovaPool(NoPool{}) {
  use_variant(*this, [] {
    return make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.policy = sova::Policy::size_classes});
  });
}
SovaPoolBuddy::SovaPoolBuddy() : SovaPool(NoPool{}) {
  use_variant(*this,
              [] { return make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.policy = sova::Policy::buddy}); });
}
SovaPoolBestFit::SovaPoolBestFit() : SovaPool(NoPool{}) {
  use_variant(*this,
              [] { return make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.policy = sova::Policy::best_fit}); });
}
SovaPoolThorough::SovaPoolThorough() : SovaPool(NoPool{}) {
  use_variant(*this, [] {
    return make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.remap_effort = sova::RemapEffort::thorough});
  });
}
SovaPoolNoRemap::SovaPoolNoRemap() : SovaPool(NoPool{}) {
  use_variant(*this, [] { return make_warm_pool(sova::cuda_driver(), sova::PoolOptions{.remap = false}); });
}

SovaPoolSim::SovaPoolSim() : SovaPool(NoPool{}) {
  label = "sim";
  sim = &shared_sim();
  static const SharedPool shared = make_warm_pool(shared_sim());
  pool = shared.pool;
  why_not = shared.error;
}

}  // namespace sova_bench
