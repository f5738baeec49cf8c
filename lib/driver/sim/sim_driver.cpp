// sova sim — SimDriver: construction, test controls, devices and memory.
// Stream and event methods are in sim_driver_streams.cpp.
#include "sim_state.hpp"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <utility>

namespace sova {
namespace {

void check_config(const SimConfig& c) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  if (c.device_count < 1) throw std::invalid_argument("SimConfig: device_count < 1");
  if (c.granularity == 0 || c.granularity % page != 0)
    throw std::invalid_argument("SimConfig: granularity must be a multiple of the page size");
}

}  // namespace

SimDriver::SimDriver(const SimConfig& config) : state_((check_config(config), std::make_unique<State>(config))) {}

SimDriver::~SimDriver() {
  // Drain the streams first: queued work may still touch the memory that the
  // State's SimMemory unmaps when it is destroyed right after.
  state_->streams->shutdown();
}

// ---- test-facing controls ---------------------------------------------------

cudaStream_t SimDriver::create_stream(bool blocking, int device) {
  if (!state_->valid_device(device))
    throw std::invalid_argument("sova sim: create_stream on a device it does not have");
  cudaStream_t s = state_->streams->create(device, blocking);
  if (s == nullptr) throw std::logic_error("sova sim: create_stream after shutdown");
  return s;
}

void SimDriver::destroy_stream(cudaStream_t stream) {
  if (state_->streams->destroy(stream) != cudaSuccess)
    throw std::invalid_argument("sova sim: destroy_stream of an invalid stream");
}

void SimDriver::launch(cudaStream_t stream, std::function<void()> work) {
  sim::Item item;
  item.work = std::move(work);
  if (state_->graphs.capture_item(stream, item)) return;  // recorded in the stream's capture
  if (state_->streams->submit(stream, std::move(item)) != cudaSuccess)
    throw std::invalid_argument("sova sim: launch on an invalid stream");
}

void SimDriver::delay(cudaStream_t stream, std::chrono::microseconds duration) {
  sim::Item item;
  item.delay = duration;
  if (state_->graphs.capture_item(stream, item)) return;
  if (state_->streams->submit(stream, std::move(item)) != cudaSuccess)
    throw std::invalid_argument("sova sim: delay on an invalid stream");
}

void SimDriver::fail_physical_create_at(int n, cudaError_t error) { state_->memory.fail_create_at(n, error); }

void SimDriver::fail_map_at(int n, cudaError_t error) { state_->memory.fail_map_at(n, error); }

void SimDriver::fail_set_access_at(int n, cudaError_t error) { state_->memory.fail_set_access_at(n, error); }

cudaError_t SimDriver::access_at(std::uintptr_t va, int device, cudaMemAccessFlags* flags) const noexcept {
  return sim::guarded([&] { return state_->memory.access_at(va, device, flags); });
}

const char* sim_call_name(SimCall call) noexcept {
  // In SimCall's order: the Driver methods' own names.
  static constexpr const char* kNames[kSimCallKinds] = {
      "device_count",
      "current_device",
      "device_info",
      "memory_info",
      "device_synchronize",
      "address_reserve",
      "address_free",
      "physical_create",
      "physical_release",
      "map",
      "unmap",
      "set_access",
      "physical_create_with",
      "granularity_for",
      "properties_at",
      "export_posix_fd",
      "import_posix_fd",
      "event_create",
      "event_create_on",
      "event_destroy",
      "event_record",
      "event_record_on",
      "event_query",
      "event_synchronize",
      "stream_wait_event",
      "stream_query",
      "stream_synchronize",
      "stream_is_capturing",
      "stream_id",
      "stream_device",
      "stream_capture_info",
      "exchange_capture_mode",
      "graph_on_release",
      "stream_create",
      "stream_destroy",
      "host_alloc",
      "host_alloc_on",
      "host_free",
      "host_map",
      "host_unmap",
      "host_register_on",
      "host_unregister",
      "memcpy_async",
      "memset_async",
  };
  const auto i = static_cast<std::size_t>(call);
  return i < kSimCallKinds ? kNames[i] : "?";
}

void SimDriver::count_this_thread(std::array<std::size_t, kSimCallKinds>* into) noexcept {
  State::ThreadSink& sink = State::thread_sink();
  sink.state = into != nullptr ? state_.get() : nullptr;
  sink.counts = into;
}

SimCounters SimDriver::counters() const {
  SimCounters c;
  for (std::size_t i = 0; i < kSimCallKinds; ++i) c.calls[i] = state_->calls[i].load(std::memory_order_relaxed);
  state_->memory.fill_counters(&c);
  c.events_recorded = state_->events_recorded.load();
  c.event_queries = state_->event_queries.load();
  c.stream_queries = state_->stream_queries.load();
  c.stream_waits = state_->stream_waits.load();
  c.device_synchronizes = state_->device_synchronizes.load();
  c.pinned_host_bytes = state_->copies.host_bytes();
  c.host_alloc_calls = state_->copies.host_alloc_calls();
  c.host_allocs = state_->copies.host_allocs();
  c.host_register_calls = state_->copies.host_register_calls();
  c.host_registers = state_->copies.host_registers();
  c.host_mapped_bytes = state_->host_maps.mapped_bytes();
  c.copies = state_->copies.copies();
  c.bytes_copied = state_->copies.bytes_copied();
  c.memsets = state_->copies.memsets();
  c.bytes_set = state_->copies.bytes_set();
  return c;
}

// ---- devices ------------------------------------------------------------------

cudaError_t SimDriver::device_count(int* count) noexcept {
  state_->count(SimCall::device_count);
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = state_->config.device_count;
  return cudaSuccess;
}

cudaError_t SimDriver::current_device(int* device) noexcept {
  state_->count(SimCall::current_device);
  state_->stream_queries.fetch_add(1, std::memory_order_relaxed);
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = sim::thread_current_device();
  return cudaSuccess;
}

cudaError_t SimDriver::set_current_device(int device) noexcept {
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  sim::thread_current_device() = device;
  return cudaSuccess;
}

cudaError_t SimDriver::device_info(int device, DeviceInfo* out) noexcept {
  state_->count(SimCall::device_info);
  if (!state_->valid_device(device)) return cudaErrorInvalidDevice;
  if (out == nullptr) return cudaErrorInvalidValue;
  const SimConfig& c = state_->config;
  *out = DeviceInfo{};
  out->ordinal = device;
  std::snprintf(out->name, sizeof out->name, "%s", "sova sim device");
  out->total_memory = c.total_memory;
  out->granularity = c.granularity;
  out->recommended_granularity = c.granularity;
  out->vmm_supported = c.vmm_supported;
  out->posix_fd_supported = c.posix_fd_supported;
  out->fabric_supported = c.fabric_supported;
  out->compression_supported = c.compression_supported;
  out->rdma_with_vmm_supported = false;
  out->multicast_supported = c.multicast_supported;
  out->host_numa_vmm_supported = c.host_numa_nodes > 0;
  out->host_numa_id = c.host_numa_nodes > 0 ? 0 : -1;
  return cudaSuccess;
}

cudaError_t SimDriver::memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  state_->count(SimCall::memory_info);
  return sim::guarded([&] { return state_->memory.info(device, free_bytes, total_bytes); });
}

// ---- memory -------------------------------------------------------------------

cudaError_t SimDriver::address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept {
  state_->count(SimCall::address_reserve);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.reserve(bytes, alignment, va);
  });
}

cudaError_t SimDriver::address_free(std::uintptr_t va, std::size_t bytes) noexcept {
  state_->count(SimCall::address_free);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.free(va, bytes);
  });
}

cudaError_t SimDriver::physical_create(int device, std::size_t bytes, PhysicalHandle* out) noexcept {
  state_->count(SimCall::physical_create);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.create(device, bytes, out);
  });
}

cudaError_t SimDriver::physical_release(PhysicalHandle handle) noexcept {
  state_->count(SimCall::physical_release);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.release(handle);
  });
}

void SimDriver::before_next_map(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(state_->map_hook_mu);
  state_->map_hook = std::move(hook);
}

cudaError_t SimDriver::map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) noexcept {
  state_->count(SimCall::map);
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> lock(state_->map_hook_mu);
    hook.swap(state_->map_hook);
  }
  if (hook) hook();
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.map(va, bytes, handle);
  });
}

cudaError_t SimDriver::unmap(std::uintptr_t va, std::size_t bytes) noexcept {
  state_->count(SimCall::unmap);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.unmap(va, bytes);
  });
}

cudaError_t SimDriver::set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                                  std::size_t count) noexcept {
  state_->count(SimCall::set_access);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.set_access(va, bytes, descs, count);
  });
}

}  // namespace sova

namespace sova {

cudaError_t SimDriver::physical_create_with(const PhysicalProps& props, std::size_t bytes,
                                            PhysicalHandle* out) noexcept {
  state_->count(SimCall::physical_create_with);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.create_with(props, bytes, out);
  });
}

cudaError_t SimDriver::granularity_for(const PhysicalProps& props, std::size_t* out) noexcept {
  state_->count(SimCall::granularity_for);
  if (out == nullptr) return cudaErrorInvalidValue;
  if (props.location.type == cudaMemLocationTypeDevice && !state_->valid_device(props.location.id))
    return cudaErrorInvalidDevice;
  *out = state_->config.granularity;  // one granularity for every location in the sim
  return cudaSuccess;
}

cudaError_t SimDriver::properties_at(std::uintptr_t va, PhysicalProps* out) noexcept {
  state_->count(SimCall::properties_at);
  return sim::guarded([&] { return state_->memory.properties_at(va, out); });
}

cudaError_t SimDriver::export_posix_fd(PhysicalHandle handle, int* fd) noexcept {
  state_->count(SimCall::export_posix_fd);
  return sim::guarded([&] { return state_->memory.export_fd(handle, fd); });
}

cudaError_t SimDriver::import_posix_fd(int fd, PhysicalHandle* out) noexcept {
  state_->count(SimCall::import_posix_fd);
  return sim::guarded([&] {
    if (cudaError_t e = state_->unsafe_call(); e != cudaSuccess) return e;
    return state_->memory.import_fd(fd, out);
  });
}

}  // namespace sova
