// sova — the driver layer: the only code that talks to CUDA.
//
// Every CUDA operation the allocator needs goes through sova::Driver. Two
// implementations exist: the real CUDA driver (cuda_driver(), entry points
// resolved at run time so the library loads on machines without a GPU) and
// SimDriver (sova/sim.hpp), a host simulation that lets CI exercise the
// allocator's logic for real.
//
// Contract for every method: returns cudaSuccess or the cudaError_t that the
// CUDA runtime would return for the same failure; on failure nothing changed
// (a failed create created nothing, a failed map mapped nothing). All methods
// are thread-safe. On the allocator's fast path the pool makes only the
// stream checks (PoolOptions::check_streams: is the stream capturing, which
// stream the handle names now) and, in a pool that gives idle memory back,
// an event record beside a free of a granule or more; docs/design.md,
// "Driver calls per pair", gives the count per pair for each configuration.
// Everything else is for growing, shrinking and coordinating streams.
#pragma once

#include <sova/export.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sova {

/// A physical allocation (one cuMemCreate handle in the CUDA driver).
using PhysicalHandle = std::uint64_t;
/// An event handle (cudaEvent_t in the CUDA driver).
using EventHandle = void*;

/// Capabilities of one device, queried the way the CUDA programming guide
/// describes (cuDeviceGetAttribute + cuMemGetAllocationGranularity).
struct DeviceInfo {
  int ordinal = 0;
  char name[256] = {};
  std::size_t total_memory = 0;             ///< bytes of device memory
  std::size_t granularity = 0;              ///< minimum VMM granularity (2 MiB on H100)
  std::size_t recommended_granularity = 0;  ///< recommended VMM granularity
  bool vmm_supported = false;               ///< CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  bool posix_fd_supported = false;          ///< ..._HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
  bool fabric_supported = false;            ///< ..._HANDLE_TYPE_FABRIC_SUPPORTED
  bool compression_supported = false;       ///< ..._GENERIC_COMPRESSION_SUPPORTED
  bool rdma_with_vmm_supported = false;     ///< ..._GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED
  bool multicast_supported = false;         ///< ..._MULTICAST_SUPPORTED (NVLink SHARP)
  bool host_numa_vmm_supported = false;     ///< ..._HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
  int host_numa_id = -1;                    ///< ..._HOST_NUMA_ID: the host node nearest the device; -1 none
};

/// What a physical allocation is made of and what it may do
/// (CUmemAllocationProp): where it lives, which shareable handles it can be
/// exported as, and whether compression is requested.
struct PhysicalProps {
  /// cudaMemLocationTypeDevice (id: the device) or cudaMemLocationTypeHostNuma
  /// (id: the host NUMA node; pinned host memory).
  cudaMemLocation location{cudaMemLocationTypeDevice, 0};
  /// cudaMemAllocationHandleType bits the allocation may be exported as
  /// (cudaMemHandleTypePosixFileDescriptor, cudaMemHandleTypeFabric); 0 none.
  unsigned handle_types = 0;
  /// Generic compression (CU_MEM_ALLOCATION_COMP_GENERIC). A request: the
  /// driver may give uncompressed memory; properties_at says what it gave.
  bool compressible = false;
};

/// What cudaStreamGetCaptureInfo says of a stream.
struct CaptureInfo {
  /// None, Active, or Invalidated (a capture that an illegal call broke: it
  /// stays a capture until cudaStreamEndCapture, which then fails).
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  /// Unique among the process's capture sequences, never reused; 0 when the
  /// stream is not capturing or the driver cannot say.
  unsigned long long id = 0;
  /// The graph being built (Active only); null when the driver cannot say.
  cudaGraph_t graph = nullptr;
};

/// Called once a graph and every executable graph made from it are destroyed
/// and every launch of them has completed (a CUDA user object's destructor).
/// Runs on a driver thread, maybe while the driver holds its own locks: it
/// must not call CUDA (nor block on anything that does).
using GraphReleaseCallback = void (*)(void* context);

class SOVA_API Driver {
 public:
  virtual ~Driver() = default;

  /// "cuda" or "sim".
  virtual const char* name() const noexcept = 0;

  // ---- devices -----------------------------------------------------------
  virtual cudaError_t device_count(int* count) noexcept = 0;
  /// The calling thread's current device (cudaGetDevice).
  virtual cudaError_t current_device(int* device) noexcept = 0;
  /// cudaErrorInvalidDevice for an ordinal out of range.
  virtual cudaError_t device_info(int device, DeviceInfo* out) noexcept = 0;
  /// Free and total device memory (cudaMemGetInfo on that device).
  virtual cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) noexcept = 0;
  /// Waits until all work on all streams of the device is complete. A device
  /// the process has not used (no active primary context) has no work to
  /// wait for: cudaSuccess, and no context is made for it.
  virtual cudaError_t device_synchronize(int device) noexcept = 0;

  // ---- virtual address space (cuMemAddressReserve / cuMemAddressFree) ----
  /// Reserves `bytes` (a multiple of the granularity) of VA, aligned to `alignment`.
  virtual cudaError_t address_reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* va) noexcept = 0;
  /// Frees a whole reservation; nothing may be mapped in it.
  virtual cudaError_t address_free(std::uintptr_t va, std::size_t bytes) noexcept = 0;

  // ---- physical memory (cuMemCreate / cuMemRelease / cuMemMap / cuMemUnmap)
  /// Creates `bytes` (a multiple of the granularity) of pinned device memory on
  /// `device`. cudaErrorMemoryAllocation when the device has too little free.
  virtual cudaError_t physical_create(int device, std::size_t bytes, PhysicalHandle* out) noexcept = 0;
  /// Releases a handle. Memory still mapped stays alive until unmapped.
  virtual cudaError_t physical_release(PhysicalHandle handle) noexcept = 0;
  /// Maps the whole of `handle` (offset 0, `bytes` = its size) at `va`.
  virtual cudaError_t map(std::uintptr_t va, std::size_t bytes, PhysicalHandle handle) noexcept = 0;
  /// Unmaps exactly one earlier map() range. The caller guarantees no work
  /// that touches the range is still pending.
  virtual cudaError_t unmap(std::uintptr_t va, std::size_t bytes) noexcept = 0;
  /// Sets access for devices (cuMemSetAccess); memory is inaccessible until set.
  virtual cudaError_t set_access(std::uintptr_t va, std::size_t bytes, const cudaMemAccessDesc* descs,
                                 std::size_t count) noexcept = 0;

  // ---- physical memory with properties, sharing, queries -----------------
  // Defaults: properties beyond plain device memory are cudaErrorNotSupported,
  // so a Driver written before these existed keeps working for plain pools.

  /// cuMemCreate with `props`. cudaErrorNotSupported for what the device
  /// cannot do (a handle type, a host location it lacks; compression is only
  /// a request and never fails a create); cudaErrorMemoryAllocation when the
  /// location has too little free. Host-NUMA memory counts against the host,
  /// not the device (`device` in physical_create names the device only).
  virtual cudaError_t physical_create_with(const PhysicalProps& props, std::size_t bytes, PhysicalHandle* out) noexcept;
  /// The minimum granularity for allocations with `props`
  /// (cuMemGetAllocationGranularity).
  virtual cudaError_t granularity_for(const PhysicalProps& props, std::size_t* out) noexcept;
  /// The properties the driver actually gave the allocation mapped at `va`
  /// (cuMemRetainAllocationHandle + cuMemGetAllocationPropertiesFromHandle):
  /// how a caller verifies that compression was granted.
  /// cudaErrorInvalidValue when nothing is mapped there.
  virtual cudaError_t properties_at(std::uintptr_t va, PhysicalProps* out) noexcept;
  /// Exports `handle` as a POSIX file descriptor that the caller owns
  /// (cuMemExportToShareableHandle). cudaErrorNotSupported unless it was
  /// created with cudaMemHandleTypePosixFileDescriptor.
  virtual cudaError_t export_posix_fd(PhysicalHandle handle, int* fd) noexcept;
  /// Imports an allocation from a descriptor another process exported
  /// (cuMemImportFromShareableHandle); `fd` stays the caller's. The handle
  /// is released with physical_release like any other; the memory lives
  /// while any process maps it. cudaErrorInvalidValue for a descriptor that
  /// is closed or names no exported allocation.
  virtual cudaError_t import_posix_fd(int fd, PhysicalHandle* out) noexcept;

  // ---- streams and events ------------------------------------------------
  /// Creates an event without timing (cudaEventDisableTiming) on the
  /// calling thread's current device.
  virtual cudaError_t event_create(EventHandle* event) noexcept = 0;
  /// Creates an event without timing on `device`, whatever the calling
  /// thread's current device: an event can be recorded only on a stream of
  /// its own device, and a pool records its fences on its device's streams
  /// from any thread. The default serves only the current device
  /// (cudaErrorInvalidDevice for another), for drivers written before it.
  virtual cudaError_t event_create_on(int device, EventHandle* event) noexcept;
  virtual cudaError_t event_destroy(EventHandle event) noexcept = 0;
  /// Captures the work submitted to `stream` so far.
  virtual cudaError_t event_record(EventHandle event, cudaStream_t stream) noexcept = 0;
  /// event_record for an event made on `device` (event_create_on): the
  /// implicit handles (0, cudaStreamLegacy, cudaStreamPerThread) name that
  /// device's streams, whatever the calling thread's current device (a pool
  /// fences its device's legacy stream from any thread: the release worker's
  /// own, a miss on another device). The default serves the implicit handles
  /// only with `device` current (cudaErrorInvalidDevice for another).
  virtual cudaError_t event_record_on(int device, EventHandle event, cudaStream_t stream) noexcept;
  /// cudaSuccess when the captured work is complete, cudaErrorNotReady if not.
  virtual cudaError_t event_query(EventHandle event) noexcept = 0;
  virtual cudaError_t event_synchronize(EventHandle event) noexcept = 0;
  /// Makes later work on `stream` wait for `event` (cudaStreamWaitEvent).
  virtual cudaError_t stream_wait_event(cudaStream_t stream, EventHandle event) noexcept = 0;
  /// cudaSuccess when all work on `stream` is complete, cudaErrorNotReady if not.
  virtual cudaError_t stream_query(cudaStream_t stream) noexcept = 0;
  virtual cudaError_t stream_synchronize(cudaStream_t stream) noexcept = 0;
  /// Whether `stream` is being captured into a graph (cudaStreamIsCapturing).
  virtual cudaError_t stream_is_capturing(cudaStream_t stream, bool* capturing) noexcept = 0;
  /// A number that identifies the stream for the life of the process and is
  /// never reused, even when a handle is (cuStreamGetId).
  virtual cudaError_t stream_id(cudaStream_t stream, unsigned long long* id) noexcept = 0;
  /// The device `stream` belongs to (cuStreamGetDevice): the device whose
  /// current pool cudaMallocAsync allocates from. For 0, cudaStreamLegacy and
  /// cudaStreamPerThread, which name a stream of the current device, the
  /// current device. The driver's error for an invalid handle. Allowed on a
  /// stream under capture, and leaves the capture valid (unlike stream_id:
  /// cuStreamGetDevice refuses, the CUDA driver answers from the stream's
  /// context). Not for fast paths (three driver calls on the CUDA driver).
  virtual cudaError_t stream_device(cudaStream_t stream, int* device) noexcept = 0;

  // ---- graph capture -----------------------------------------------------
  // Defaults, for drivers written before capture was served: capture_info
  // from stream_is_capturing (no id, no graph: a pool then refuses to
  // allocate under capture), exchange_capture_mode a no-op answering
  // cudaStreamCaptureModeGlobal, the rest cudaErrorNotSupported.

  /// The capture state of `stream` (cudaStreamGetCaptureInfo). The driver's
  /// error for an invalid handle.
  virtual cudaError_t stream_capture_info(cudaStream_t stream, CaptureInfo* out) noexcept;
  /// Sets the calling thread's capture mode to `*mode` and stores the mode it
  /// had in `*mode` (cudaThreadExchangeStreamCaptureMode). Under
  /// cudaStreamCaptureModeRelaxed a thread's "potentially unsafe" calls
  /// (cuMemCreate, cuMemMap, cudaMalloc, ...) never invalidate a capture.
  virtual cudaError_t exchange_capture_mode(cudaStreamCaptureMode* mode) noexcept;
  /// Arranges for `callback(context)` to be called once, when `graph` (one
  /// that capture_info returned, still being captured) and every executable
  /// graph instantiated from it are destroyed and all their launches have
  /// completed (cudaUserObjectCreate + cudaGraphRetainUserObject with
  /// cudaGraphUserObjectMove). Enqueues nothing on any stream. On failure the
  /// callback is never called.
  virtual cudaError_t graph_on_release(cudaGraph_t graph, GraphReleaseCallback callback, void* context) noexcept;
  /// A non-blocking stream of `device` that the caller owns
  /// (cudaStreamCreateWithFlags(cudaStreamNonBlocking), whatever the calling
  /// thread's current device), and its destruction.
  virtual cudaError_t stream_create(int device, cudaStream_t* out) noexcept;
  virtual cudaError_t stream_destroy(cudaStream_t stream) noexcept;

  // ---- pinned host memory and copies (a pool's sleep and wake) ------------
  // Defaults, for drivers written before sleep existed: cudaErrorNotSupported
  // (a pool then refuses a sleep with backup and still sleeps with discard).

  /// Page-locked host memory that every device may copy to and from
  /// (cudaHostAlloc with cudaHostAllocPortable). cudaErrorMemoryAllocation
  /// when the host has too little.
  virtual cudaError_t host_alloc(std::size_t bytes, void** out) noexcept;
  /// host_alloc with `device`'s context current, from a thread that may have
  /// none: a sleep pins on threads of its own, where the runtime would pick
  /// device 0's context (creating it on a device the process may not use).
  /// Default: host_alloc.
  virtual cudaError_t host_alloc_on(int device, std::size_t bytes, void** out) noexcept;
  /// Frees what host_alloc gave (cudaFreeHost): no copy may still use it.
  virtual cudaError_t host_free(void* ptr) noexcept;
  /// Host memory to pin later, not pinned yet: `bytes` (rounded up to a
  /// multiple of 2 MiB) of anonymous private memory (mmap), aligned to 2 MiB, with transparent
  /// huge pages asked for where the host has them (madvise MADV_HUGEPAGE),
  /// not inherited by a child of fork() (MADV_DONTFORK).
  /// Its pages cost nothing until touched. Why: cudaHostAlloc faults and
  /// pins its pages itself, on one thread at a time; pages the caller faults
  /// in on several threads and then registers (host_register_on) pin an
  /// order of magnitude faster (docs/sleep-wake.md, "The first sleep, and pinning ahead").
  /// cudaErrorMemoryAllocation when the host refuses the mapping (address
  /// space, overcommit). Default: cudaErrorNotSupported (a pool then pins
  /// with host_alloc_on).
  virtual cudaError_t host_map(std::size_t bytes, void** out) noexcept;
  /// Gives back what host_map gave, the whole of it (`bytes` as asked of
  /// host_map; munmap): the process's
  /// resident memory drops by its touched pages. Nothing in it may be
  /// registered. Default: cudaErrorNotSupported.
  virtual cudaError_t host_unmap(void* ptr, std::size_t bytes) noexcept;
  /// Page-locks [ptr, ptr + bytes) of memory host_map gave, for every
  /// device's copies (cudaHostRegister with cudaHostRegisterPortable), with
  /// `device`'s context current from any thread (as host_alloc_on). The
  /// driver's error when it refuses (cudaErrorMemoryAllocation: the host
  /// cannot lock that much); on failure nothing is locked.
  /// Default: cudaErrorNotSupported.
  virtual cudaError_t host_register_on(int device, void* ptr, std::size_t bytes) noexcept;
  /// Unlocks what host_register_on locked at `ptr` (cudaHostUnregister): no
  /// copy may still use it; the memory stays mapped. Default:
  /// cudaErrorNotSupported.
  virtual cudaError_t host_unregister(void* ptr) noexcept;
  /// Copies `bytes` from `src` to `dst` in the order of `stream`
  /// (cudaMemcpyAsync, cudaMemcpyDefault: unified addressing says which side
  /// is the device's). Returns once enqueued; a failed call enqueued nothing.
  virtual cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) noexcept;
  /// Sets `bytes` bytes of device memory from `ptr` to `value` (its low byte)
  /// in the order of `stream` (cuMemsetD8Async): a wake after
  /// SleepMode::discard_zeroed. Returns once enqueued; a failed call enqueued
  /// nothing. 0 bytes: nothing enqueued, cudaSuccess where memsets are
  /// supported (a pool asks so at sleep). Default: cudaErrorNotSupported.
  virtual cudaError_t memset_async(void* ptr, int value, std::size_t bytes, cudaStream_t stream) noexcept;
};

/// The real CUDA driver (process-wide). Loads without a GPU or driver: every
/// call then fails with the runtime's error (cudaErrorNoDevice,
/// cudaErrorInsufficientDriver, ...).
SOVA_API Driver& cuda_driver() noexcept;

/// The driver the C API uses: the CUDA driver, unless the environment variable
/// SOVA_DRIVER=sim selected the host simulation at first use, or
/// set_process_driver() chose another before the first C API call.
SOVA_API Driver& process_driver() noexcept;
/// Chooses the C API's driver. Returns cudaErrorInvalidValue (and changes
/// nothing) once the C API has created a pool. `driver` must outlive them.
SOVA_API cudaError_t set_process_driver(Driver* driver) noexcept;

}  // namespace sova
