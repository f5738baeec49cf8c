// sova_bench_torch — PyTorch's caching allocator (see torch_allocator.hpp).
#include "torch_allocator.hpp"

#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#if defined(SOVA_TORCH_CORE_SETTINGS)
#include <c10/core/AllocatorConfig.h>
#endif

#include <cstdint>
#include <exception>
#include <stdexcept>

namespace sova_bench {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// The process's allocator, initialised for every device on first use (a
// Python process does this in torch.cuda's lazy init; a C++ program linking
// only c10 must do it itself).
cca::CUDAAllocator& torch_allocator() {
  static cca::CUDAAllocator* const allocator = [] {
    cca::CUDAAllocator* a = cca::get();
    if (a == nullptr) throw std::runtime_error("c10::cuda::CUDACachingAllocator::get() is null");
    if (!a->initialized()) {
      int devices = 0;
      check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
      a->init(devices);
    }
    return a;
  }();
  return *allocator;
}

void set_allocator_settings(const std::string& settings) {
#if defined(SOVA_TORCH_CORE_SETTINGS)
  c10::CachingAllocator::setAllocatorSettings(settings);  // PyTorch >= 2.9
#elif defined(SOVA_TORCH_CUDA_SETTINGS)
  cca::setAllocatorSettings(settings);
#else
  throw std::runtime_error("this PyTorch has no setAllocatorSettings that meson could find: cannot set '" +
                           settings + "'");
#endif
}

// Puts the allocator in the mode asked for, releasing what it cached in the
// other one. -1: not yet set by this program (whatever PYTORCH_CUDA_ALLOC_CONF said).
int current_mode = -1;

void select_mode(bool expandable) {
  cca::CUDAAllocator& a = torch_allocator();
  if (current_mode == static_cast<int>(expandable)) return;
  if (expandable && a.name() != "native") {
    throw std::runtime_error("PyTorch's allocator backend is '" + a.name() +
                             "', not 'native': expandable segments do not apply");
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.emptyCache();
  set_allocator_settings(expandable ? "expandable_segments:True" : "expandable_segments:False");
  if (cca::CUDAAllocatorConfig::expandable_segments() != expandable) {
    throw std::runtime_error(std::string("PyTorch did not take expandable_segments:") +
                             (expandable ? "True" : "False"));
  }
  current_mode = static_cast<int>(expandable);
}

}  // namespace

TorchAllocator::TorchAllocator(bool expandable) {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  try {
    select_mode(expandable);
  } catch (const std::exception& e) {
    why_not = e.what();
  }
}

void* TorchAllocator::allocate(std::size_t bytes, cudaStream_t stream) {
  return torch_allocator().raw_alloc_with_stream(bytes, stream);
}

void TorchAllocator::deallocate(void* ptr, cudaStream_t) { torch_allocator().raw_delete(ptr); }

void TorchAllocator::reset_peaks() {
  cca::CUDAAllocator& a = torch_allocator();
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.emptyCache();
  a.resetPeakStats(0);
}

PeakFigures TorchAllocator::read_peaks() {
  const auto stats = torch_allocator().getDeviceStats(0);
  constexpr std::size_t kAggregate = 0;  // StatType::AGGREGATE
  PeakFigures peaks;
  peaks.reserved_high = static_cast<std::uint64_t>(stats.reserved_bytes[kAggregate].peak);
  peaks.used_high = static_cast<std::uint64_t>(stats.requested_bytes[kAggregate].peak);
  return peaks;
}

std::string torch_allocator_name() {
  if (!have_gpu()) return "no GPU";
  try {
    return torch_allocator().name();
  } catch (const std::exception& e) {
    return std::string("unavailable: ") + e.what();
  }
}

}  // namespace sova_bench
