// sova benchmarks — what the seed program and sova_bench share: finding a GPU,
// the host simulation used where there is none, and the host clock.
#pragma once

#include <sova/sim.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>

namespace sova_bench {

/// True when the CUDA runtime sees at least one device (cudaGetDeviceCount
/// succeeds with a count > 0). Asked once; every GPU case keys off this.
bool have_gpu();

/// "NVIDIA H100 80GB HBM3" for device 0, or "no GPU".
std::string device_name();

/// One SimDriver for the whole process (SimConfig defaults: one 1 GiB device,
/// 2 MiB granules). Never destroyed: the C API's pools may still call into it
/// during static destruction at exit.
sova::SimDriver& shared_sim();

/// The driver behind sova's C API for this process. Without a GPU it is made
/// shared_sim() (sova::set_process_driver) on the first call, which must come
/// before any other C API call. Returns the SimDriver whose streams the C API
/// must be given, or nullptr when it runs on CUDA (then use CUDA streams).
/// Exits the process with a message if the driver cannot be chosen.
sova::SimDriver* capi_sim();

/// The host clock every figure here is read from (whole-program wall time).
using Clock = std::chrono::steady_clock;
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Throws std::runtime_error("<what>: <CUDA error string>") unless err is cudaSuccess.
void check_cuda(cudaError_t err, const char* what);

/// An owned stream of either world: a CUDA non-blocking stream when `sim` is
/// null, a stream of `sim` otherwise. Throws std::runtime_error when it cannot
/// be created.
class Stream {
 public:
  explicit Stream(sova::SimDriver* sim);
  ~Stream();  // waits for the stream's work, then destroys it
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  /// Waits for the stream's work; throws std::runtime_error on an error.
  void sync() const;

 private:
  sova::SimDriver* sim_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace sova_bench
