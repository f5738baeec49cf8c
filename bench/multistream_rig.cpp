// multistream/ — the plan of sizes and the rig (see multistream.hpp).
#include "multistream.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

namespace sova_bench {
namespace {

constexpr std::size_t kFixedSizes[] = {std::size_t{1} << 20, std::size_t{2} << 20, std::size_t{4} << 20,
                                       std::size_t{8} << 20, std::size_t{16} << 20};
constexpr int kFixedCount = sizeof kFixedSizes / sizeof kFixedSizes[0];
static_assert(kFixedSizes[kFixedCount - 1] <= kMsMaxBytes);

MultiStreamPlan make_plan(bool random_sizes) {
  MultiStreamPlan plan{};
  // splitmix64: the same sequence on every machine and standard library.
  std::uint64_t state = 0x5eed5eedULL;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  constexpr std::size_t kMin = std::size_t{1} << 20;
  constexpr std::size_t kStep = 256;
  for (int r = 0; r < kMsRounds; ++r) {
    for (int s = 0; s < kMsStreams; ++s) {
      for (int t = 0; t < kMsTemps; ++t) {
        // Fixed: the two temporaries of a kernel differ in size, and what one
        // stream frees in a round is what its neighbour asks for in the next.
        plan.bytes[r][s][t] = random_sizes ? kMin + next() % ((kMsMaxBytes - kMin) / kStep + 1) * kStep
                                           : kFixedSizes[(r + s + 2 * t) % kFixedCount];
      }
    }
  }
  return plan;
}

// The sim's kernel: the same tag write / wait / check as the GPU's, on the host.
void sim_kernel(void* const* temps, const std::size_t* bytes, std::uint32_t tag, std::atomic<std::uint64_t>& errors) {
  auto value = [tag](int k, std::size_t w) {
    return tag * 2654435761u ^ static_cast<std::uint32_t>(k) * 40503u ^ static_cast<std::uint32_t>(w);
  };
  for (int k = 0; k < kMsTemps; ++k) {
    auto* p = static_cast<unsigned char*>(temps[k]);
    for (std::size_t w = 0; w * kTouchStride < bytes[k]; ++w) {
      const std::uint32_t v = value(k, w);
      std::memcpy(p + w * kTouchStride, &v, sizeof v);
    }
  }
  std::this_thread::sleep_for(std::chrono::microseconds(kKernelMicroseconds));
  std::uint64_t bad = 0;
  for (int k = 0; k < kMsTemps; ++k) {
    const auto* p = static_cast<const unsigned char*>(temps[k]);
    for (std::size_t w = 0; w * kTouchStride < bytes[k]; ++w) {
      std::uint32_t got;
      std::memcpy(&got, p + w * kTouchStride, sizeof got);
      bad += got != value(k, w);
    }
  }
  if (bad != 0) errors.fetch_add(bad);
}

}  // namespace

const MultiStreamPlan& multistream_plan(bool random_sizes) {
  static const MultiStreamPlan fixed = make_plan(false);
  static const MultiStreamPlan random = make_plan(true);
  return random_sizes ? random : fixed;
}

MultiStreamRig::MultiStreamRig(sova::SimDriver* sim) : sim_(sim) {
#if !defined(SOVA_BENCH_KERNELS)
  if (sim_ == nullptr) throw std::runtime_error("built without CUDA kernels (no nvcc, or -Dgpu=disabled)");
#endif
  for (auto& stream : streams_) stream = std::make_unique<Stream>(sim_);
  if (sim_ != nullptr) {
    // Host memory: the sim's "kernels" run on the host.
    for (void*& p : floor_) {
      p = std::aligned_alloc(4096, kMsMaxBytes);
      if (p == nullptr) throw std::runtime_error("aligned_alloc(16 MiB) failed");
    }
    return;
  }
  (void)cudaGetLastError();  // clear what an earlier case left, so sync() reports only this rig's launches
  for (void*& p : floor_) check_cuda(cudaMalloc(&p, kMsMaxBytes), "cudaMalloc(floor buffer)");
  void* counter = nullptr;
  check_cuda(cudaMalloc(&counter, sizeof(unsigned long long)), "cudaMalloc(error counter)");
  device_errors_ = static_cast<unsigned long long*>(counter);
  check_cuda(cudaMemset(device_errors_, 0, sizeof(unsigned long long)), "cudaMemset(error counter)");
}

MultiStreamRig::~MultiStreamRig() {
  for (auto& stream : streams_) {  // the kernels may still use the floor buffers
    try {
      if (stream) stream->sync();
    } catch (const std::exception&) {
    }
  }
  if (sim_ != nullptr) {
    for (void* p : floor_) std::free(p);
    return;
  }
  for (void* p : floor_) {
    if (p != nullptr) cudaFree(p);
  }
  if (device_errors_ != nullptr) cudaFree(device_errors_);
}

void MultiStreamRig::launch(int s, void* const* temps, const std::size_t* bytes, std::uint32_t tag) {
  if (sim_ != nullptr) {
    std::array<void*, kMsTemps> t;
    std::array<std::size_t, kMsTemps> b;
    for (int k = 0; k < kMsTemps; ++k) {
      t[static_cast<std::size_t>(k)] = temps[k];
      b[static_cast<std::size_t>(k)] = bytes[k];
    }
    sim_->launch(stream(s), [t, b, tag, errors = &sim_errors_] { sim_kernel(t.data(), b.data(), tag, *errors); });
    return;
  }
#if defined(SOVA_BENCH_KERNELS)
  launch_multistream_kernel(stream(s), temps, bytes, kMsTemps, tag, kKernelMicroseconds * 1000, device_errors_);
#endif
}

void MultiStreamRig::sync() {
  for (auto& stream : streams_) stream->sync();
  if (sim_ == nullptr) check_cuda(cudaGetLastError(), "multistream kernel launch");
}

std::uint64_t MultiStreamRig::errors() {
  sync();
  if (sim_ != nullptr) return sim_errors_.load();
  unsigned long long count = 0;
  check_cuda(cudaMemcpy(&count, device_errors_, sizeof count, cudaMemcpyDeviceToHost), "cudaMemcpy(error counter)");
  return count;
}

}  // namespace sova_bench
