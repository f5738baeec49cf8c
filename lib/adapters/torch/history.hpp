// sova_torch — allocation history for PyTorch's memory snapshot format
// (python/sova/torch.py turns it into torch.cuda.memory._snapshot()'s dict).
// Off by default; while on, every allocation and free takes one mutex.
#pragma once

#include "sova_torch.h"

#include <atomic>

namespace sova::torch_adapter {

extern std::atomic<bool> g_history_on;

/// Records one event (and keeps the live-block table) when recording is on.
void history_event(int action, int device, void* addr, std::size_t size, cudaStream_t stream) noexcept;
inline void maybe_history(int action, int device, void* addr, std::size_t size, cudaStream_t stream) noexcept {
  if (g_history_on.load(std::memory_order_relaxed)) history_event(action, device, addr, size, stream);
}

}  // namespace sova::torch_adapter
