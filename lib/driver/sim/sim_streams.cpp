// sova sim — the stream registry (see sim_streams.hpp).
#include "sim_streams.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <utility>

namespace sova::sim {
namespace {

constexpr std::uintptr_t kSlotBase = 0x5100'0000'0000;
constexpr std::uintptr_t kSlotStride = 0x100;

// Process-wide, so ids stay unique across SimDriver instances too.
std::atomic<unsigned long long> g_next_stream_id{1};
std::atomic<std::uint64_t> g_next_thread_serial{1};

// One per host thread: a serial that, unlike std::thread::id, is never reused,
// and the registries that gave this thread a per-thread stream, told when the
// thread exits so they retire that stream.
struct ThreadHook {
  const std::uint64_t serial = g_next_thread_serial.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::weak_ptr<SimStreams>> owners;

  ~ThreadHook() {
    for (auto& owner : owners)
      if (auto streams = owner.lock()) streams->thread_exited(serial);
  }
};

ThreadHook& thread_hook() {
  thread_local ThreadHook hook;
  return hook;
}

cudaStream_t slot_handle(std::size_t slot) { return reinterpret_cast<cudaStream_t>(kSlotBase + slot * kSlotStride); }

bool is_implicit(cudaStream_t handle) {
  return handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread;
}

void join_all(const std::vector<std::shared_ptr<Stream>>& streams) {
  for (const auto& s : streams) s->join();
}

}  // namespace

int& thread_current_device() noexcept {
  thread_local int device = 0;
  return device;
}

SimStreams::SimStreams(int device_count)
    : device_count_(device_count), legacy_(static_cast<std::size_t>(device_count)) {}

SimStreams::~SimStreams() { shutdown(); }

void SimStreams::shutdown() {
  std::vector<StreamPtr> all;
  {
    std::lock_guard lock(mu_);
    shut_down_ = true;
    for_each_stream([&](const StreamPtr& s) { all.push_back(s); });
    for (auto& l : legacy_)
      if (l) all.push_back(l);
    slots_.clear();
    legacy_.assign(legacy_.size(), nullptr);
    per_thread_.clear();
    retired_.clear();
  }
  // Outside the lock: a worker's host work may still call into the registry,
  // and a worker's thread-exit hook takes the lock.
  for (const auto& s : all) s->close();
  join_all(all);
}

template <class F>
void SimStreams::for_each_stream(F&& f) {  // all but the legacy streams
  for (const auto& s : slots_)
    if (s) f(s);
  for (const auto& [key, s] : per_thread_) f(s);
  for (const auto& s : retired_) f(s);
}

SimStreams::StreamPtr SimStreams::make_stream(int device, StreamKind kind) {
  return std::make_shared<Stream>(g_next_stream_id.fetch_add(1, std::memory_order_relaxed), device, kind);
}

SimStreams::StreamPtr SimStreams::resolve(cudaStream_t handle) {
  if (shut_down_) return nullptr;
  if (handle == nullptr || handle == cudaStreamLegacy || handle == cudaStreamPerThread) {
    // A current device beyond this simulation's (set on another, larger one)
    // names no stream here.
    const int device = thread_current_device();
    if (device < 0 || device >= device_count_) return nullptr;
    if (handle != cudaStreamPerThread) {
      auto& legacy = legacy_[static_cast<std::size_t>(device)];
      if (!legacy) legacy = make_stream(device, StreamKind::legacy);
      return legacy;
    }
    ThreadHook& hook = thread_hook();
    const std::pair key{hook.serial, device};
    if (auto it = per_thread_.find(key); it != per_thread_.end()) return it->second;
    // Build first, insert after: make_stream may throw, and the tables hold no nulls.
    StreamPtr s = make_stream(device, StreamKind::blocking);
    std::erase_if(hook.owners, [](const auto& w) { return w.expired(); });
    hook.owners.push_back(weak_from_this());
    per_thread_.emplace(key, s);
    return s;
  }
  const auto v = reinterpret_cast<std::uintptr_t>(handle);
  if (v < kSlotBase || (v - kSlotBase) % kSlotStride != 0) return nullptr;
  const std::size_t slot = (v - kSlotBase) / kSlotStride;
  return slot < slots_.size() ? slots_[slot] : nullptr;
}

std::vector<SimStreams::StreamPtr> SimStreams::take_exited() {
  std::vector<StreamPtr> done;
  std::erase_if(retired_, [&](const StreamPtr& s) {
    if (!s->exited()) return false;
    done.push_back(s);
    return true;
  });
  return done;
}

cudaStream_t SimStreams::create(int device, bool blocking) {
  std::vector<StreamPtr> done;
  cudaStream_t handle = nullptr;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return nullptr;
    done = take_exited();
    auto s = make_stream(device, blocking ? StreamKind::blocking : StreamKind::non_blocking);
    auto free_slot = std::find(slots_.begin(), slots_.end(), nullptr);
    const auto slot = static_cast<std::size_t>(free_slot - slots_.begin());
    if (free_slot == slots_.end())
      slots_.push_back(std::move(s));
    else
      *free_slot = std::move(s);
    handle = slot_handle(slot);
  }
  join_all(done);  // their workers have exited: near-instant
  return handle;
}

cudaError_t SimStreams::destroy(cudaStream_t handle) {
  std::vector<StreamPtr> done;
  {
    std::lock_guard lock(mu_);
    if (is_implicit(handle)) return cudaErrorInvalidResourceHandle;
    StreamPtr s = resolve(handle);
    if (!s) return cudaErrorInvalidResourceHandle;
    slots_[(reinterpret_cast<std::uintptr_t>(handle) - kSlotBase) / kSlotStride] = nullptr;
    s->close();
    // An idle stream's worker leaves at once: join it now. Left retired for a
    // later create or destroy, the last stream a process destroys was never
    // joined, and ThreadSanitizer fails that process for a thread leak (the
    // IPC peer process did). A busy stream stays retired so that destroy,
    // like cudaStreamDestroy, does not wait for queued work.
    if (s->busy())
      retired_.push_back(std::move(s));
    else
      done.push_back(std::move(s));
    std::vector<StreamPtr> exited = take_exited();
    done.insert(done.end(), exited.begin(), exited.end());
  }
  join_all(done);
  return cudaSuccess;
}

std::size_t SimStreams::retired_count() {
  std::lock_guard lock(mu_);
  return retired_.size();
}

void SimStreams::add_legacy_waits(Stream& s, Item& item) {
  switch (s.kind) {
    case StreamKind::legacy:
      // Wait for everything earlier on the device's blocking streams.
      for_each_stream([&](const StreamPtr& b) {
        if (b->kind != StreamKind::blocking || b->device != s.device) return;
        Point p{b, b->submitted()};
        if (!p.reached()) item.waits.push_back(std::move(p));
      });
      break;
    case StreamKind::blocking: {
      // Wait for legacy work submitted since this stream last did so.
      const auto& legacy = legacy_[static_cast<std::size_t>(s.device)];
      if (!legacy) break;
      const std::uint64_t seq = legacy->submitted();
      if (seq <= s.legacy_seen) break;
      s.legacy_seen = seq;
      Point p{legacy, seq};
      if (!p.reached()) item.waits.push_back(std::move(p));
      break;
    }
    case StreamKind::non_blocking: break;
  }
}

cudaError_t SimStreams::submit(cudaStream_t handle, Item item, Point* at) {
  std::lock_guard lock(mu_);
  StreamPtr s = resolve(handle);
  if (!s) return cudaErrorInvalidResourceHandle;
  add_legacy_waits(*s, item);
  const std::uint64_t seq = s->enqueue(std::move(item));
  if (at != nullptr) *at = Point{std::move(s), seq};
  return cudaSuccess;
}

cudaError_t SimStreams::tail(cudaStream_t handle, Point* out) {
  std::lock_guard lock(mu_);
  StreamPtr s = resolve(handle);
  if (!s) return cudaErrorInvalidResourceHandle;
  const std::uint64_t seq = s->submitted();
  *out = Point{std::move(s), seq};
  return cudaSuccess;
}

cudaError_t SimStreams::device_of(cudaStream_t handle, int* out) {
  std::lock_guard lock(mu_);
  StreamPtr s = resolve(handle);
  if (!s) return cudaErrorInvalidResourceHandle;
  *out = s->device;
  return cudaSuccess;
}

cudaError_t SimStreams::id(cudaStream_t handle, unsigned long long* out) {
  std::lock_guard lock(mu_);
  StreamPtr s = resolve(handle);
  if (!s) return cudaErrorInvalidResourceHandle;
  *out = s->id;
  return cudaSuccess;
}

std::vector<Point> SimStreams::device_tails(int device) {
  std::vector<Point> tails;
  std::lock_guard lock(mu_);
  auto add = [&](const StreamPtr& s) {
    if (s->device == device) tails.push_back(Point{s, s->submitted()});
  };
  for_each_stream(add);
  if (device >= 0 && device < device_count_ && legacy_[static_cast<std::size_t>(device)])
    add(legacy_[static_cast<std::size_t>(device)]);
  return tails;
}

void SimStreams::thread_exited(std::uint64_t thread_serial) {
  std::vector<StreamPtr> mine;  // one per device the thread used
  std::vector<StreamPtr> done;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    auto it = per_thread_.lower_bound(std::pair{thread_serial, std::numeric_limits<int>::min()});
    while (it != per_thread_.end() && it->first.first == thread_serial) {
      it->second->close();
      mine.push_back(it->second);
      retired_.push_back(std::move(it->second));  // device_tails covers it while it drains
      it = per_thread_.erase(it);
    }
    if (mine.empty()) return;
    done = take_exited();
  }
  // Drained, then joined, here: the exiting thread waits for its streams'
  // queued work. Left to a later create or destroy, the worker of the last
  // thread to exit (the main thread's, at exit) was never joined, which
  // ThreadSanitizer reports as a thread leak. Outside the lock:
  // the queued work may call into the registry.
  join_all(mine);
  join_all(done);
}

}  // namespace sova::sim
