// sova_torch — the adapter's process-wide state, shared by its files.
#pragma once

#include "sova_torch.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace sova::torch_adapter {

/// Devices the adapter serves (PyTorch's own limit is 64 per process).
constexpr int kMaxDevices = 64;

struct DeviceState {
  std::atomic<sovaMemPool_t> pool{nullptr};
  std::atomic<std::uint64_t> num_ooms{0};
  std::atomic<std::uint64_t> bytes_allocated{0};
  std::atomic<std::uint64_t> bytes_freed{0};
  std::atomic<std::uint64_t> live_blocks{0};
  std::atomic<std::uint64_t> live_blocks_peak{0};
  std::atomic<std::uint64_t> record_stream_waits{0};
  std::atomic<std::uint64_t> deferred_frees{0};
  std::atomic<std::uint64_t> free_errors{0};
  std::atomic<std::uint64_t> record_stream_calls{0};
};

struct State {
  std::mutex mutex;  ///< pool creation and configure
  sovaTorchOptions options{0, sovaPolicyDefault, 0, 0, 0};
  bool any_pool = false;  ///< under mutex
  std::array<DeviceState, kMaxDevices> devices;
};

State& state() noexcept;

/// Retries the frees deferred because their stream was under graph capture
/// (those whose stream has left capture go through). Cheap when none is.
void flush_deferred_frees() noexcept;
/// Sets the calling thread's message for sova_torch_last_error().
void set_last_error(std::string message) noexcept;
/// Makes a pool on `device` with the adapter's options (policy, size limit,
/// flags, release threshold): the device pools' and the tags' pools alike.
/// The caller holds state().mutex. On failure nothing is left behind, and
/// `*create_failed` says whether sovaMemPoolCreate itself refused (else the
/// threshold could not be set).
cudaError_t create_pool_with_options(const sovaTorchOptions& options, int device, sovaMemPool_t* out,
                                     bool* create_failed) noexcept;
/// "1.50 GiB": sizes for messages.
std::string format_bytes(std::uint64_t bytes);

}  // namespace sova::torch_adapter
