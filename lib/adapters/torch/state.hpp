// sova_torch — the adapter's process-wide state, shared by its files.
#pragma once

#include "sova_torch.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>

namespace sova::torch_adapter {

/// Devices the adapter serves (PyTorch's own limit is 64 per process).
constexpr int kMaxDevices = 64;

/// No memory limit (sova_torch_memory_limit).
constexpr std::uint64_t kNoLimit = std::numeric_limits<std::uint64_t>::max();

struct DeviceState {
  std::atomic<sovaMemPool_t> pool{nullptr};
  std::atomic<sovaMemPool_t> segment_pool{nullptr};  ///< sova_torch_malloc_pool_segment's
  std::atomic<double> fraction{1.0};                  ///< sova_torch_set_memory_fraction
  std::atomic<std::uint64_t> limit{kNoLimit};         ///< bytes the fraction gives
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
/// The device's segment pool (sova_torch_malloc_pool_segment), created on
/// first use with the adapter's options; never the device's current pool.
cudaError_t segment_pool_for(int device, sovaMemPool_t* out) noexcept;
/// As sova_torch_malloc_nothrow, but never checked against the memory limit:
/// a private pool's segment, whose growth PyTorch's allocator checks.
void* segment_malloc(std::size_t size, int device, cudaStream_t stream) noexcept;
/// An allocation from `pool` that no counter, history or limit sees (the
/// segment pool's), and its free; NULL / nothing on failure, message set.
void* uncounted_malloc(std::size_t size, sovaMemPool_t pool, cudaStream_t stream) noexcept;
void uncounted_free(void* ptr, cudaStream_t stream) noexcept;
/// "1.50 GiB": sizes for messages.
std::string format_bytes(std::uint64_t bytes);

}  // namespace sova::torch_adapter
