// sova_torch — record_stream: a table of (block, stream) pairs, and the
// event + wait inserted when such a block is freed (record_streams.hpp).
#include "record_streams.hpp"

#include <sova/driver.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace sova::torch_adapter {
namespace {

std::mutex g_mutex;
std::unordered_map<void*, std::vector<cudaStream_t>> g_recorded;  // under g_mutex
std::atomic<std::size_t> g_count{0};                              // g_recorded.size(), read without the lock

}  // namespace

void record_stream(void* ptr, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  auto& streams = g_recorded[ptr];
  for (const cudaStream_t s : streams)
    if (s == stream) return;
  streams.push_back(stream);
  g_count.store(g_recorded.size(), std::memory_order_relaxed);
}

std::uint64_t order_recorded_streams(void* ptr, cudaStream_t free_stream) noexcept {
  // A relaxed load suffices: record_stream and the free of the same block are
  // ordered by the caller (the tensor is alive while record_stream runs).
  if (g_count.load(std::memory_order_relaxed) == 0) return 0;
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard lock(g_mutex);
    const auto it = g_recorded.find(ptr);
    if (it == g_recorded.end()) return 0;
    streams.swap(it->second);
    g_recorded.erase(it);
    g_count.store(g_recorded.size(), std::memory_order_relaxed);
  }
  Driver& driver = process_driver();
  std::uint64_t waits = 0;
  for (const cudaStream_t s : streams) {
    if (s == free_stream) continue;
    EventHandle event = nullptr;
    cudaError_t err = driver.event_create(&event);
    if (err == cudaSuccess) err = driver.event_record(event, s);
    if (err == cudaSuccess) err = driver.stream_wait_event(free_stream, event);
    if (event != nullptr) (void)driver.event_destroy(event);  // the wait keeps what it needs
    if (err == cudaSuccess) {
      ++waits;
      continue;
    }
    // Cannot order the streams: wait on the host for the recorded stream
    // instead, which is slower but as safe.
    if (driver.stream_synchronize(s) != cudaSuccess)
      std::fprintf(stderr, "sova.torch: could not order a freed block after stream %p (error %d)\n",
                   static_cast<void*>(s), static_cast<int>(err));
  }
  return waits;
}

}  // namespace sova::torch_adapter
