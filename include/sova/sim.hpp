// sova — SimDriver: a faithful host simulation of the CUDA driver's VMM and
// stream APIs, so that the allocator's logic runs for real without a GPU.
//
//  * physical chunks are memfd files (one descriptor per live chunk: the
//    simulation holds at most as many chunks as the process may open files,
//    RLIMIT_NOFILE; beyond, physical_create returns cudaErrorOperatingSystem
//    and says so once on stderr, never a false out of memory; a pool then
//    fails the allocation with that error); VA reservations are PROT_NONE mappings;
//    map is mmap(MAP_FIXED|MAP_SHARED) of the chunk's file; set_access is
//    mprotect. Touching memory that is reserved but unmapped, or mapped without
//    access, faults exactly as it would on a GPU (SIGSEGV here).
//  * streams are host work queues, each with its own worker thread; events are
//    markers in them; stream_wait_event blocks the waiting stream's worker.
//  * stream capture and graphs are modelled (begin_capture, end_capture,
//    graph_instantiate, graph_launch, ...; lib/driver/sim/sim_graphs.hpp):
//    work launched on a capturing stream is recorded, a launch replays it in
//    order on the launch stream, capture modes decide which calls invalidate
//    a capture, and release callbacks run once a graph, its executables and
//    their launches are all gone. A capture may fork over several streams
//    and join back (events waited on, as in CUDA).
//  * failures and delays can be injected, so stream-ordering and error paths
//    are reproducible in CI.
//  * a copy (memcpy_async) and a kernel that says what it touches
//    (launch_touching) are checked as they run: a byte of reserved VA not
//    mapped with the access they need is a device fault, which aborts with
//    its words or, with SimConfig::abort_on_fault false, is recorded for the
//    test (faults(), first_fault()). Plain launch() work is not checked.
//
// Stream handles: sim streams are cudaStream_t values made by create_stream().
// The legacy default stream (0 / cudaStreamLegacy) and cudaStreamPerThread are
// simulated too, per device: they name the calling thread's current device's
// (set_current_device; 0 until set), the latter one stream per host thread and
// device (a thread's exit waits until its per-thread streams' queued work has
// run). Like CUDA, the legacy stream is ordered with blocking streams: work
// submitted to it waits for all earlier work on blocking streams and vice
// versa. An event belongs to the device it was created on (event_create: the
// current one) and can be recorded only on that device's streams.
#pragma once

#include <sova/driver.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace sova {

struct SimConfig {
  int device_count = 1;
  std::size_t total_memory = std::size_t{1} << 30;  ///< per device
  std::size_t granularity = std::size_t{2} << 20;   ///< minimum = recommended
  bool vmm_supported = true;
  bool posix_fd_supported = true;
  bool fabric_supported = false;
  bool compression_supported = false;  ///< true: compressible requests are granted
  bool multicast_supported = false;    ///< reported only; the sim has no multicast objects
  /// Host NUMA nodes that cudaMemLocationTypeHostNuma may name (0: none, and
  /// host-NUMA creates are cudaErrorNotSupported); each holds host_memory.
  int host_numa_nodes = 1;
  std::size_t host_memory = std::size_t{1} << 30;
  /// Whether the Driver's VMM calls run as if in relaxed capture mode, as
  /// the CUDA driver makes them (they then never invalidate a capture).
  /// false: they are "potentially unsafe" calls under the calling thread's
  /// capture mode, as raw cuMemCreate/cuMemMap are.
  bool relax_vmm_calls = true;
  /// Pinned host memory host_alloc gives and host_register_on locks in all
  /// (the host RAM backups may lock): beyond, they fail with
  /// cudaErrorMemoryAllocation, as cudaHostAlloc and cudaHostRegister do on
  /// a host without that much. 0: no limit.
  std::size_t pinned_host_memory = std::size_t{64} << 30;
  /// A device fault of a copy or a checked kernel (launch_touching) aborts
  /// the process with what faulted (true), or is recorded, the faulting work
  /// doing nothing, for the test to read with faults() and first_fault().
  bool abort_on_fault = true;
};

/// One value per sova::Driver method (include/sova/driver.hpp; name() aside),
/// named as the method: what SimCounters::calls counts. A call is counted once,
/// on entry, whatever it returns, as the driver was asked it; a method the
/// simulation carries out through another (event_record_on through
/// event_record) counts as itself only. test/structure/check_driver_overrides.py
/// fails when a Driver method has no value here.
enum class SimCall : unsigned char {
  device_count,
  current_device,
  device_info,
  memory_info,
  device_synchronize,
  address_reserve,
  address_free,
  physical_create,
  physical_release,
  map,
  unmap,
  set_access,
  physical_create_with,
  granularity_for,
  properties_at,
  export_posix_fd,
  import_posix_fd,
  event_create,
  event_create_on,
  event_destroy,
  event_record,
  event_record_on,
  event_query,
  event_synchronize,
  stream_wait_event,
  stream_query,
  stream_synchronize,
  stream_is_capturing,
  stream_id,
  stream_device,
  stream_capture_info,
  exchange_capture_mode,
  graph_on_release,
  stream_create,
  stream_destroy,
  host_alloc,
  host_alloc_on,
  host_free,
  host_map,
  host_unmap,
  host_register_on,
  host_unregister,
  memcpy_async,
  memset_async,
  kinds  ///< how many there are (not a call)
};
inline constexpr std::size_t kSimCallKinds = static_cast<std::size_t>(SimCall::kinds);
/// The method's name ("stream_is_capturing"), or "?" for a value out of range.
SOVA_API const char* sim_call_name(SimCall call) noexcept;

/// Counters a test can read to see what the allocator asked of the driver.
struct SimCounters {
  /// Calls by kind, indexed by SimCall (SimCounters::of): every Driver method,
  /// the budget of docs/design.md, "Driver calls per pair", is checked on.
  std::array<std::size_t, kSimCallKinds> calls{};
  std::size_t of(SimCall call) const noexcept { return calls[static_cast<std::size_t>(call)]; }
  std::size_t physical_bytes = 0;    ///< created and not yet released (device memory)
  std::size_t host_bytes = 0;        ///< host-NUMA memory created and not yet released
  std::size_t imported_handles = 0;  ///< imported chunks not yet released
  std::size_t physical_creates = 0;
  std::size_t physical_releases = 0;
  std::size_t maps = 0;
  std::size_t unmaps = 0;
  std::size_t set_access_calls = 0;
  std::size_t reservations = 0;  ///< live VA reservations
  std::size_t mappings = 0;      ///< live mappings (map calls not yet unmapped)
  std::size_t events_recorded = 0;
  std::size_t event_queries = 0;  ///< event_query calls (each a driver call on a GPU)
  /// stream_is_capturing, stream_capture_info, stream_id, stream_device and
  /// current_device calls: what the pool's stream checks ask the driver
  std::size_t stream_queries = 0;
  std::size_t stream_waits = 0;
  std::size_t device_synchronizes = 0;
  /// host_alloc memory not yet freed, and host_register_on ranges not yet unregistered
  std::size_t pinned_host_bytes = 0;
  std::size_t host_alloc_calls = 0;     ///< host_alloc calls begun, ever (counted on entry, before any delay)
  std::size_t host_allocs = 0;          ///< host_alloc calls that pinned memory, ever
  std::size_t host_register_calls = 0;  ///< host_register_on calls begun, ever (on entry, before any delay)
  std::size_t host_registers = 0;       ///< host_register_on calls that locked memory, ever
  std::size_t host_mapped_bytes = 0;    ///< host_map memory not yet unmapped (registered or not)
  std::size_t copies = 0;             ///< memcpy_async calls enqueued
  std::size_t bytes_copied = 0;       ///< their bytes
  std::size_t memsets = 0;            ///< memset_async calls enqueued
  std::size_t bytes_set = 0;          ///< their bytes
};

class SOVA_API SimDriver final : public Driver {
 public:
  explicit SimDriver(const SimConfig& config = SimConfig{});
  ~SimDriver() override;  // drains and joins every stream worker
  SimDriver(const SimDriver&) = delete;
  SimDriver& operator=(const SimDriver&) = delete;

  // ---- test-facing controls ---------------------------------------------
  /// A new stream of `device`; `blocking` = false gives
  /// cudaStreamNonBlocking semantics. Throws std::invalid_argument for a
  /// device the simulation does not have.
  cudaStream_t create_stream(bool blocking = false, int device = 0);
  /// Destroys a stream. Like cudaStreamDestroy, returns at once: work already
  /// queued still runs. The handle may be reused by a later create_stream().
  void destroy_stream(cudaStream_t stream);
  /// Enqueues host work that runs in stream order (the sim's "kernel").
  void launch(cudaStream_t stream, std::function<void()> work);
  /// Enqueues a "kernel" that reads (and, with `writes`, writes) the device
  /// memory [ptr, ptr + bytes): when it runs, that memory must be mapped with
  /// that access, else it is a device fault (SimConfig::abort_on_fault) and
  /// `work` does not run. `work` runs under the simulation's memory lock (no
  /// unmap comes between the check and it): it must not call the driver.
  void launch_touching(cudaStream_t stream, const void* ptr, std::size_t bytes, bool writes,
                       std::function<void()> work);
  /// Device faults recorded so far (SimConfig::abort_on_fault false), and
  /// the first one's words ("" when none).
  std::size_t faults() const;
  std::string first_fault() const;
  /// Enqueues a busy period: the stream does nothing else for `duration`.
  void delay(cudaStream_t stream, std::chrono::microseconds duration);
  /// Every copy enqueued from now on keeps its stream busy for `duration`
  /// before it runs (a slow link): the host work that follows a call that
  /// enqueues copies then runs before them, as it may on a GPU. 0: none.
  void delay_copies(std::chrono::microseconds duration);
  /// Every pin from now on (host_alloc, host_register_on) takes `duration`
  /// before it returns (pinning runs at a few GiB/s on a real host), on the
  /// calling thread, holding no lock of the simulation's. 0: none.
  void delay_host_pins(std::chrono::microseconds duration);
  /// Runs `hook` once, on the thread that makes the next map call, before
  /// that call maps anything and holding no lock of the simulation's (so it
  /// may call the pool or the driver): a test's way to act while a pool is
  /// in the middle of an operation that maps (a wake's remapping, a growth).
  /// `hook` must not throw (it runs inside a noexcept driver call).
  void before_next_map(std::function<void()> hook);
  /// The next `n`-th physical_create call (1 = the next one) fails with `error`.
  void fail_physical_create_at(int n, cudaError_t error = cudaErrorMemoryAllocation);
  /// The next `n`-th map call fails with `error`.
  void fail_map_at(int n, cudaError_t error = cudaErrorUnknown);
  /// The next `n`-th set_access call fails with `error`.
  void fail_set_access_at(int n, cudaError_t error = cudaErrorUnknown);
  /// The next `n`-th host_alloc, memcpy_async or unmap call fails with `error`.
  void fail_host_alloc_at(int n, cudaError_t error = cudaErrorMemoryAllocation);
  /// The next `n`-th host_map call fails with `error` (the host refusing the
  /// mapping), mapping nothing.
  void fail_host_map_at(int n, cudaError_t error = cudaErrorMemoryAllocation);
  /// The next `n`-th host_register_on call fails with `error` (the driver
  /// refusing to lock the pages), locking nothing.
  void fail_host_register_at(int n, cudaError_t error = cudaErrorMemoryAllocation);
  void fail_memcpy_at(int n, cudaError_t error = cudaErrorUnknown);
  /// The next `n`-th memset_async call (a pool's 0-byte probe at sleep
  /// included) fails with `error`, enqueuing nothing: cudaErrorNotSupported
  /// models a driver without memsets.
  void fail_memset_at(int n, cudaError_t error = cudaErrorUnknown);
  void fail_unmap_at(int n, cudaError_t error = cudaErrorUnknown);
  SimCounters counters() const;
  /// From now on, every call the calling thread makes of this driver also
  /// adds one to (*into)[SimCall] (nullptr: stop; one driver per thread at a
  /// time). What the pool asks on the caller's thread, without what its
  /// release worker or other threads ask meanwhile: the driver-call budget's
  /// measure (docs/design.md, "Driver calls per pair").
  void count_this_thread(std::array<std::size_t, kSimCallKinds>* into) noexcept;
  /// The calling thread's current device from now on, as cudaSetDevice:
  /// implicit streams (0, cudaStreamLegacy, cudaStreamPerThread) and
  /// event_create then name that device's. Per host thread, shared by every
  /// SimDriver (a thread starts on device 0). cudaErrorInvalidDevice for a
  /// device this simulation does not have.
  cudaError_t set_current_device(int device) noexcept;
  /// The access `device` has to the memory mapped at `va`, as cuMemGetAccess
  /// would say: cudaErrorInvalidValue where nothing is mapped.
  cudaError_t access_at(std::uintptr_t va, int device, cudaMemAccessFlags* flags) const noexcept;

  // ---- graphs (the runtime's cudaStreamBeginCapture & co.) ------------------
  /// cudaStreamBeginCapture: cudaErrorStreamCaptureUnsupported for the legacy
  /// stream, cudaErrorIllegalState if the stream already captures.
  cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode) noexcept;
  /// cudaStreamEndCapture: the graph; cudaErrorStreamCaptureInvalidated (and
  /// no graph) if the capture was invalidated.
  cudaError_t end_capture(cudaStream_t stream, cudaGraph_t* graph) noexcept;
  cudaError_t graph_instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) noexcept;
  /// Enqueues the graph's recorded work, in capture order, on `stream`.
  cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream) noexcept;
  cudaError_t graph_destroy(cudaGraph_t graph) noexcept;
  cudaError_t graph_exec_destroy(cudaGraphExec_t exec) noexcept;
  std::size_t live_graphs() const;       ///< graphs not yet destroyed
  std::size_t live_graph_execs() const;  ///< executable graphs not yet destroyed

  // ---- Driver -------------------------------------------------------------
  const char* name() const noexcept override { return "sim"; }
  cudaError_t device_count(int* count) noexcept override;
  cudaError_t current_device(int* device) noexcept override;
  cudaError_t device_info(int device, DeviceInfo* out) noexcept override;
  cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept override;
  cudaError_t device_synchronize(int device) noexcept override;
  cudaError_t address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept override;
  cudaError_t address_free(std::uintptr_t va, std::size_t bytes) noexcept override;
  cudaError_t physical_create(int device, std::size_t bytes, PhysicalHandle* out) noexcept override;
  cudaError_t physical_release(PhysicalHandle handle) noexcept override;
  cudaError_t map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) noexcept override;
  cudaError_t unmap(std::uintptr_t va, std::size_t bytes) noexcept override;
  cudaError_t set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                         std::size_t count) noexcept override;
  cudaError_t physical_create_with(const PhysicalProps& props, std::size_t bytes,
                                   PhysicalHandle* out) noexcept override;
  cudaError_t granularity_for(const PhysicalProps& props, std::size_t* out) noexcept override;
  cudaError_t properties_at(std::uintptr_t va, PhysicalProps* out) noexcept override;
  /// The chunk's memfd, dup'ed: passed over a Unix socket it shares the
  /// bytes with another process, as a CUDA POSIX handle does.
  cudaError_t export_posix_fd(PhysicalHandle handle, int* fd) noexcept override;
  /// Accepts only a sim chunk's memfd (from export_posix_fd, here or in
  /// another process); imported chunks count against no device.
  cudaError_t import_posix_fd(int fd, PhysicalHandle* out) noexcept override;
  cudaError_t event_create(EventHandle* event) noexcept override;
  cudaError_t event_create_on(int device, EventHandle* event) noexcept override;
  cudaError_t event_destroy(EventHandle event) noexcept override;
  cudaError_t event_record(EventHandle event, cudaStream_t stream) noexcept override;
  cudaError_t event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept override;
  cudaError_t event_query(EventHandle event) noexcept override;
  cudaError_t event_synchronize(EventHandle event) noexcept override;
  cudaError_t stream_wait_event(cudaStream_t stream, EventHandle event) noexcept override;
  cudaError_t stream_query(cudaStream_t stream) noexcept override;
  cudaError_t stream_synchronize(cudaStream_t stream) noexcept override;
  cudaError_t stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept override;
  cudaError_t stream_id(cudaStream_t stream, unsigned long long* id) noexcept override;
  cudaError_t stream_device(cudaStream_t stream, int* device) noexcept override;
  cudaError_t stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept override;
  /// Per host thread, shared by every simulation (as the runtime's).
  cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept override;
  cudaError_t graph_on_release(cudaGraph_t graph, GraphReleaseCallback callback, void* context) noexcept override;
  cudaError_t stream_create(int device, cudaStream_t* out) noexcept override;
  cudaError_t stream_destroy(cudaStream_t stream) noexcept override;
  /// Plain host memory, counted (SimCounters::pinned_host_bytes); a copy is
  /// a memcpy run in stream order (lib/driver/sim/sim_copies.hpp).
  cudaError_t host_alloc(std::size_t bytes, void** out) noexcept override;
  /// As host_alloc (the simulation's host memory is one), counted as itself.
  cudaError_t host_alloc_on(int device, std::size_t bytes, void** out) noexcept override;
  cudaError_t host_free(void* ptr) noexcept override;
  /// Real anonymous memory, mapped as the CUDA driver maps it
  /// (lib/driver/sim/sim_host_maps.hpp), counted (host_mapped_bytes).
  cudaError_t host_map(std::size_t bytes, void** out) noexcept override;
  /// cudaErrorInvalidValue, nothing unmapped, for a range still registered
  /// (a real host would keep its pages locked) or not one whole mapping.
  cudaError_t host_unmap(void* ptr, std::size_t bytes) noexcept override;
  /// Counted in pinned_host_bytes; cudaErrorInvalidValue for a range not
  /// inside one host_map mapping.
  cudaError_t host_register_on(int device, void* ptr, std::size_t bytes) noexcept override;
  cudaError_t host_unregister(void* ptr) noexcept override;
  cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept override;
  /// A memset run in stream order, faulting as a copy's write does.
  cudaError_t memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream) noexcept override;

  struct State;  // implementation (lib/driver/sim/)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace sova
