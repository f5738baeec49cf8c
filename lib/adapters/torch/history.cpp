// sova_torch — the history ring buffer and the table of live blocks
// allocated while recording (history.hpp).
#include "history.hpp"

#include <chrono>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace sova::torch_adapter {

std::atomic<bool> g_history_on{false};

namespace {

std::mutex g_mutex;
std::deque<sovaTorchEvent> g_events;               // under g_mutex
std::unordered_map<void*, sovaTorchEvent> g_live;  // under g_mutex
std::size_t g_max_entries = 0;                     // under g_mutex

std::uint64_t now_us() noexcept {
  using namespace std::chrono;
  return static_cast<std::uint64_t>(duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
}

}  // namespace

void history_event(int action, int device, void* addr, std::size_t size, cudaStream_t stream) noexcept {
  sovaTorchEvent e{
      action, device, reinterpret_cast<std::uint64_t>(addr), size, reinterpret_cast<std::uint64_t>(stream), now_us()};
  try {
    std::lock_guard lock(g_mutex);
    if (!g_history_on.load(std::memory_order_relaxed)) return;
    if (action == 0) g_live[addr] = e;
    if (action == 2) g_live.erase(addr);
    if (g_max_entries == 0) return;
    if (g_events.size() == g_max_entries) g_events.pop_front();
    g_events.push_back(e);
  } catch (...) {
    // Out of host memory while recording: the event is lost, not the free.
  }
}

}  // namespace sova::torch_adapter

using namespace sova::torch_adapter;

int sova_torch_record_history(int enabled, size_t maxEntries) {
  std::lock_guard lock(g_mutex);
  if (enabled != 0) {
    g_events.clear();
    g_live.clear();
    g_max_entries = maxEntries;
  }
  g_history_on.store(enabled != 0, std::memory_order_relaxed);
  return cudaSuccess;
}

size_t sova_torch_history(sovaTorchEvent* out, size_t capacity) {
  std::lock_guard lock(g_mutex);
  std::size_t i = 0;
  if (out != nullptr)
    for (const auto& e : g_events) {
      if (i == capacity) break;
      out[i++] = e;
    }
  return g_events.size();
}

size_t sova_torch_live_blocks(sovaTorchEvent* out, size_t capacity) {
  std::lock_guard lock(g_mutex);
  std::size_t i = 0;
  if (out != nullptr)
    for (const auto& [ptr, e] : g_live) {
      if (i == capacity) break;
      out[i++] = e;
    }
  return g_live.size();
}
