// replay/ — TimedDriver: a sova::Driver that forwards every call to another
// driver and counts, per kind of call, how many were made and the wall time
// they took. Pools built on it say where a workload's driver time goes (maps,
// unmaps, access grants, event records, waits) on the real driver, where the
// simulation can only count calls (bench/replay/driver_time.cpp).
//
// Thread-safe as the wrapped driver is: counters are relaxed atomics.
#pragma once

#include <sova/driver.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace sova_bench {

class TimedDriver final : public sova::Driver {
 public:
  /// The calls counted; the others (device queries, stream identity) are
  /// forwarded untimed, as no allocation path makes them more than once.
  enum Call : int {
    kPhysicalCreate,
    kPhysicalRelease,
    kMap,
    kUnmap,
    kSetAccess,
    kEventCreate,
    kEventRecord,
    kEventQuery,
    kEventSynchronize,
    kStreamWaitEvent,
    kStreamQuery,
    kStreamSynchronize,
    kDeviceSynchronize,
    kCallCount
  };
  static const char* call_name(int call) noexcept {
    static constexpr const char* kNames[kCallCount] = {
        "physical_create",   "physical_release",  "map",          "unmap",
        "set_access",        "event_create",      "event_record", "event_query",
        "event_synchronize", "stream_wait_event", "stream_query", "stream_synchronize",
        "device_synchronize"};
    return kNames[call];
  }

  struct Tally {
    std::uint64_t calls = 0;
    std::uint64_t ns = 0;
  };
  using Tallies = std::array<Tally, kCallCount>;

  explicit TimedDriver(sova::Driver& inner) : inner_(inner) {}

  /// Counts and times so far (each a consistent figure, not the set as one).
  Tallies tallies() const noexcept {
    Tallies out;
    for (int i = 0; i < kCallCount; ++i) {
      out[i].calls = counters_[i].calls.load(std::memory_order_relaxed);
      out[i].ns = counters_[i].ns.load(std::memory_order_relaxed);
    }
    return out;
  }

  const char* name() const noexcept override { return inner_.name(); }
  cudaError_t device_count(int* count) noexcept override { return inner_.device_count(count); }
  cudaError_t current_device(int* device) noexcept override { return inner_.current_device(device); }
  cudaError_t device_info(int device, sova::DeviceInfo* out) noexcept override {
    return inner_.device_info(device, out);
  }
  cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept override {
    return inner_.memory_info(device, free_bytes, total_bytes);
  }
  cudaError_t device_synchronize(int device) noexcept override {
    return timed(kDeviceSynchronize, [&] { return inner_.device_synchronize(device); });
  }
  cudaError_t address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept override {
    return inner_.address_reserve(bytes, alignment, va);
  }
  cudaError_t address_free(std::uintptr_t va, std::size_t bytes) noexcept override {
    return inner_.address_free(va, bytes);
  }
  cudaError_t physical_create(int device, std::size_t bytes, sova::PhysicalHandle* out) noexcept override {
    return timed(kPhysicalCreate, [&] { return inner_.physical_create(device, bytes, out); });
  }
  cudaError_t physical_release(sova::PhysicalHandle handle) noexcept override {
    return timed(kPhysicalRelease, [&] { return inner_.physical_release(handle); });
  }
  cudaError_t map(std::uintptr_t va, std::size_t bytes, sova::PhysicalHandle handle) noexcept override {
    return timed(kMap, [&] { return inner_.map(va, bytes, handle); });
  }
  cudaError_t unmap(std::uintptr_t va, std::size_t bytes) noexcept override {
    return timed(kUnmap, [&] { return inner_.unmap(va, bytes); });
  }
  cudaError_t set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                         std::size_t count) noexcept override {
    return timed(kSetAccess, [&] { return inner_.set_access(va, bytes, descs, count); });
  }
  cudaError_t physical_create_with(const sova::PhysicalProps& props, std::size_t bytes,
                                   sova::PhysicalHandle* out) noexcept override {
    return timed(kPhysicalCreate, [&] { return inner_.physical_create_with(props, bytes, out); });
  }
  cudaError_t granularity_for(const sova::PhysicalProps& props, std::size_t* out) noexcept override {
    return inner_.granularity_for(props, out);
  }
  cudaError_t properties_at(std::uintptr_t va, sova::PhysicalProps* out) noexcept override {
    return inner_.properties_at(va, out);
  }
  cudaError_t export_posix_fd(sova::PhysicalHandle handle, int* fd) noexcept override {
    return inner_.export_posix_fd(handle, fd);
  }
  cudaError_t import_posix_fd(int fd, sova::PhysicalHandle* out) noexcept override {
    return inner_.import_posix_fd(fd, out);
  }
  cudaError_t event_create(sova::EventHandle* event) noexcept override {
    return timed(kEventCreate, [&] { return inner_.event_create(event); });
  }
  cudaError_t event_create_on(int device, sova::EventHandle* event) noexcept override {
    return timed(kEventCreate, [&] { return inner_.event_create_on(device, event); });
  }
  cudaError_t event_destroy(sova::EventHandle event) noexcept override { return inner_.event_destroy(event); }
  cudaError_t event_record(sova::EventHandle event, cudaStream_t stream) noexcept override {
    return timed(kEventRecord, [&] { return inner_.event_record(event, stream); });
  }
  cudaError_t event_query(sova::EventHandle event) noexcept override {
    return timed(kEventQuery, [&] { return inner_.event_query(event); });
  }
  cudaError_t event_synchronize(sova::EventHandle event) noexcept override {
    return timed(kEventSynchronize, [&] { return inner_.event_synchronize(event); });
  }
  cudaError_t stream_wait_event(cudaStream_t stream, sova::EventHandle event) noexcept override {
    return timed(kStreamWaitEvent, [&] { return inner_.stream_wait_event(stream, event); });
  }
  cudaError_t stream_query(cudaStream_t stream) noexcept override {
    return timed(kStreamQuery, [&] { return inner_.stream_query(stream); });
  }
  cudaError_t stream_synchronize(cudaStream_t stream) noexcept override {
    return timed(kStreamSynchronize, [&] { return inner_.stream_synchronize(stream); });
  }
  cudaError_t stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept override {
    return inner_.stream_is_capturing(stream, capturing);
  }
  cudaError_t stream_id(cudaStream_t stream, unsigned long long* id) noexcept override {
    return inner_.stream_id(stream, id);
  }
  cudaError_t stream_device(cudaStream_t stream, int* device) noexcept override {
    return inner_.stream_device(stream, device);
  }

 private:
  struct Counter {
    std::atomic<std::uint64_t> calls{0};
    std::atomic<std::uint64_t> ns{0};
  };

  template <class F>
  cudaError_t timed(Call call, F&& f) noexcept {
    const auto start = std::chrono::steady_clock::now();
    const cudaError_t result = f();
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    counters_[call].calls.fetch_add(1, std::memory_order_relaxed);
    counters_[call].ns.fetch_add(static_cast<std::uint64_t>(ns.count()), std::memory_order_relaxed);
    return result;
  }

  sova::Driver& inner_;
  std::array<Counter, kCallCount> counters_;
};

}  // namespace sova_bench
