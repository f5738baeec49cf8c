// sova_bench_torch — PyTorch's caching allocator (see torch_allocator.hpp).
#include "torch_allocator.hpp"

#include <c10/cuda/CUDACachingAllocator.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>

namespace sova_bench {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

// Set once the allocator has been made: the cudaStreamDestroy wrapper below
// has nothing to release before that.
std::atomic<bool> allocator_made{false};

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
    allocator_made.store(true);
    return a;
  }();
  return *allocator;
}

bool process_expandable = false;

// The probe: kProbeBytes (a large-pool size) on the legacy default stream,
// which lives as long as the process; the allocator's snapshot tells whether
// the segment holding it is expandable. Freed and the cache emptied after.
constexpr std::size_t kProbeBytes = std::size_t{2} << 20;

bool probe_expandable(cca::CUDAAllocator& a) {
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.emptyCache();
  void* p = a.raw_alloc_with_stream(kProbeBytes, nullptr);
  bool found = false;
  bool expandable = false;
  std::size_t segments = 0;
  try {
    const auto snapshot = a.snapshot();
    segments = snapshot.segments.size();
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    for (const auto& segment : snapshot.segments) {
      const auto base = static_cast<std::uintptr_t>(segment.address);
      const auto size = static_cast<std::uintptr_t>(segment.total_size);
      if (address >= base && address - base < size) {
        found = true;
        expandable = segment.is_expandable;
        break;
      }
    }
  } catch (...) {
    a.raw_delete(p);
    throw;
  }
  a.raw_delete(p);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  a.emptyCache();
  a.resetPeakStats(0);
  if (!found) {
    throw std::runtime_error("the probe allocation is in none of the " + std::to_string(segments) +
                             " segments of PyTorch's allocator snapshot");
  }
  return expandable;
}

// What the probe saw: 1 expandable, 0 not, -1 not probed (another backend,
// or the probe failed: mode_error() says why).
int seen_expandable = -1;

std::string settings_in_force() {
  std::string s;
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    if (!s.empty()) s += ", ";
    s += std::string(name) + "=" + value;
  }
  return s.empty() ? "PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF unset" : s;
}

std::string find_mode_error() {
  if (!have_gpu()) return "no GPU";
  try {
    cca::CUDAAllocator& a = torch_allocator();
    if (a.name() != "native") {
      if (process_expandable) {
        return "PyTorch's allocator backend is '" + a.name() + "', not 'native': expandable segments do not apply (" +
               settings_in_force() + ")";
      }
      return "";  // torch_caching on another backend: torch_allocator in the context says which
    }
    const bool expandable = probe_expandable(a);
    seen_expandable = expandable ? 1 : 0;
    if (expandable != process_expandable) {
      return std::string("PyTorch's allocator ") + (expandable ? "made" : "did not make") +
             " expandable segments, but this process runs " +
             (process_expandable ? "torch_expandable" : "torch_caching") + " (" + settings_in_force() + ")";
    }
    return "";
  } catch (const std::exception& e) {
    return std::string("PyTorch's allocator could not be probed: ") + e.what();
  }
}

std::mutex release_mutex;
std::string release_error;

// Before `stream` is destroyed: let its work finish, then release everything
// the allocator caches (so no segment is left on the stream).
void release_before_destroy(cudaStream_t stream) {
  std::string error;
  const cudaError_t err = cudaStreamSynchronize(stream);
  if (err != cudaSuccess) error = std::string("cudaStreamSynchronize: ") + cudaGetErrorString(err);
  try {
    torch_allocator().emptyCache();
  } catch (const std::exception& e) {
    error += (error.empty() ? "" : "; ") + std::string("emptyCache: ") + e.what();
  }
  if (error.empty()) return;
  std::fprintf(stderr, "sova_bench_torch: before cudaStreamDestroy: %s\n", error.c_str());
  const std::lock_guard<std::mutex> lock(release_mutex);
  if (release_error.empty()) release_error = "before a stream was destroyed: " + error;
}

}  // namespace

void set_torch_expandable(bool expandable) { process_expandable = expandable; }
bool torch_expandable() { return process_expandable; }

const std::string& torch_mode_error() {
  static const std::string error = find_mode_error();
  return error;
}

std::string torch_expandable_seen() {
  const std::string& error = torch_mode_error();
  if (seen_expandable >= 0) return seen_expandable != 0 ? "true" : "false";
  return "unknown: " + (error.empty() ? std::string("not probed (backend not native)") : error);
}

std::string torch_release_error() {
  const std::lock_guard<std::mutex> lock(release_mutex);
  return release_error;
}

TorchAllocator::TorchAllocator(bool expandable) {
  if (!have_gpu()) {
    why_not = "no GPU";
    return;
  }
  if (expandable != process_expandable) {
    why_not = expandable ? "this process runs torch_caching; torch_expandable needs sova_bench_torch --expandable"
                         : "this process runs torch_expandable (--expandable); torch_caching needs a run without it";
    return;
  }
  why_not = torch_mode_error();
  if (why_not.empty()) why_not = torch_release_error();
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

MemoryNow memory_now(TorchAllocator&) {
  const auto stats = torch_allocator().getDeviceStats(0);
  constexpr std::size_t kAggregate = 0;  // StatType::AGGREGATE
  MemoryNow now;
  now.reserved = static_cast<std::uint64_t>(stats.reserved_bytes[kAggregate].current);
  now.used = static_cast<std::uint64_t>(stats.requested_bytes[kAggregate].current);
  return now;
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

// The cudaStreamDestroy that this program's own code calls (common.cpp's
// Stream, through the linker's --wrap=cudaStreamDestroy; PyTorch's libraries
// call the real one): empties the allocator's cache first, see
// torch_allocator.hpp. __real_cudaStreamDestroy is the CUDA runtime's.
extern "C" cudaError_t __real_cudaStreamDestroy(cudaStream_t stream);
extern "C" cudaError_t __wrap_cudaStreamDestroy(cudaStream_t stream) {
  if (sova_bench::allocator_made.load()) sova_bench::release_before_destroy(stream);
  return __real_cudaStreamDestroy(stream);
}
