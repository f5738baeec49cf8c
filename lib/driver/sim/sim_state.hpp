// sova sim — SimDriver::State: what one SimDriver owns, and the helper its
// noexcept Driver methods use to turn exceptions into CUDA errors.
#pragma once

#include <sova/sim.hpp>

#include "sim_copies.hpp"
#include "sim_events.hpp"
#include "sim_faults.hpp"
#include "sim_graphs.hpp"
#include "sim_host_maps.hpp"
#include "sim_memory.hpp"
#include "sim_streams.hpp"

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>

namespace sova {

struct SimDriver::State {
  explicit State(const SimConfig& c)
      : config(c),
        memory(c),
        streams(std::make_shared<sim::SimStreams>(c.device_count)),
        graphs(streams),
        copies(c.pinned_host_memory),
        faults(c.abort_on_fault) {}

  /// A potentially unsafe call (a VMM call): refused, invalidating
  /// captures, where the calling thread's capture mode prohibits it, unless
  /// the simulation relaxes its VMM calls as the CUDA driver does.
  cudaError_t unsafe_call() { return config.relax_vmm_calls ? cudaSuccess : graphs.unsafe_call(); }

  bool valid_device(int device) const noexcept { return device >= 0 && device < config.device_count; }

  const SimConfig config;
  sim::SimMemory memory;
  // Shared: per-thread stream hooks hold weak references to it.
  std::shared_ptr<sim::SimStreams> streams;
  sim::SimGraphs graphs;  // after streams: captures name them
  sim::SimEvents events;
  sim::SimHostMaps host_maps;  // host memory mapped to be registered
  sim::SimCopies copies;        // pinned host memory and memcpy_async
  sim::SimFaults faults;  // what copies and checked kernels touched that was not mapped
  /// Driver calls by kind (SimCounters::calls), counted on entry; also into
  /// the calling thread's sink while it has one for this State
  /// (SimDriver::count_this_thread).
  std::array<std::atomic<std::size_t>, kSimCallKinds> calls{};
  struct ThreadSink {
    const State* state = nullptr;
    std::array<std::size_t, kSimCallKinds>* counts = nullptr;
  };
  static ThreadSink& thread_sink() noexcept {
    static thread_local ThreadSink sink;
    return sink;
  }
  void count(SimCall call) noexcept {
    const auto i = static_cast<std::size_t>(call);
    calls[i].fetch_add(1, std::memory_order_relaxed);
    if (const ThreadSink& sink = thread_sink(); sink.state == this) ++(*sink.counts)[i];
  }
  std::atomic<std::size_t> events_recorded{0};
  std::atomic<std::size_t> event_queries{0};
  std::atomic<std::size_t> stream_queries{0};
  std::atomic<std::size_t> stream_waits{0};
  std::atomic<std::size_t> device_synchronizes{0};
  /// SimDriver::before_next_map's hook, taken (and cleared) by the next map.
  std::mutex map_hook_mu;
  std::function<void()> map_hook;
};

namespace sim {

/// Runs `f` (returning cudaError_t) and maps what it may throw (allocation of
/// a table entry, start of a worker thread) to the runtime's errors.
template <class F>
cudaError_t guarded(F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return cudaErrorMemoryAllocation;
  } catch (...) {
    return cudaErrorUnknown;
  }
}

}  // namespace sim
}  // namespace sova
