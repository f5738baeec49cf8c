// sova — sharing a pool with other processes (IPC), as the runtime's
// cudaMemPoolExportToShareableHandle / ImportFromShareableHandle /
// ExportPointer / ImportPointer do. docs/ipc.md has the design: how an
// importer learns of chunks the exporter creates, moves and releases later,
// what is reachable with what, and the error cases.
//
// Exporter: a pool created with PoolOptions::handle_types =
// cudaMemHandleTypePosixFileDescriptor, and a PoolExporter beside it (which
// must be destroyed before the pool). share() makes one POSIX file
// descriptor per importer, which the program sends over a Unix socket
// (SCM_RIGHTS); export_pointer() turns a live block into 64 bytes of export
// data, which the program sends any way it likes.
// Importer: ImportedPool(fd) then import_pointer(data): the same memory at
// an address of the importer's own.
// Ordering is the program's, as with the runtime: the importer frees
// (free_pointer) before the exporter frees the block, and data written in
// one process is read in the other only after the writer's stream work is
// complete (a synchronize and a message, or an IPC event).
#pragma once

#include <sova/driver.hpp>
#include <sova/export.h>
#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <memory>

namespace sova {

namespace ipc_detail {
class ExporterImpl;
class ImporterImpl;
}  // namespace ipc_detail

class SOVA_API PoolExporter {
 public:
  /// Starts answering importers of `pool` (one thread, idle until asked).
  /// Throws Error(cudaErrorInvalidValue) unless the pool's handle types
  /// include cudaMemHandleTypePosixFileDescriptor.
  explicit PoolExporter(Pool& pool);
  /// Stops answering: later imports fail cleanly in the importers; what
  /// they imported stays mapped and valid there until they free it.
  ~PoolExporter();
  PoolExporter(const PoolExporter&) = delete;
  PoolExporter& operator=(const PoolExporter&) = delete;

  /// A new descriptor for one importer (the caller owns it and closes it
  /// after sending). -1 and the error in *error (if given) on failure.
  int share(cudaError_t* error = nullptr) noexcept;
  /// Export data for the live block starting at `ptr`: cudaErrorInvalidValue
  /// for anything else (nothing recorded).
  cudaError_t export_pointer(const void* ptr, cudaMemPoolPtrExportData* out) noexcept;
  /// Drops the block's export: data exported for it is stale from now on
  /// (importers get cudaErrorInvalidValue). Call before freeing an exported
  /// block, or free through deallocate(); the C API does it in sovaFreeAsync.
  void forget(const void* ptr) noexcept;
  /// forget(ptr), then pool.deallocate(ptr, stream).
  void deallocate(void* ptr, cudaStream_t stream);

 private:
  std::unique_ptr<ipc_detail::ExporterImpl> impl_;
};

struct ImportOptions {
  /// The device the importer maps the memory for; -1: the exporter pool's
  /// device ordinal.
  int device = -1;
  /// cudaMemAccessFlagsProtRead maps imported memory read-only (a guard
  /// against mistakes, not a security boundary: docs/ipc.md).
  cudaMemAccessFlags access = cudaMemAccessFlagsProtReadWrite;
  Driver* driver = nullptr;  ///< nullptr = process_driver()
};

class SOVA_API ImportedPool {
 public:
  /// Connects to the exporter through `fd` (which stays the caller's) and
  /// reserves VA for the pool's addresses. Throws Error: cudaErrorInvalidValue
  /// for a closed descriptor, one that is not a sova pool handle, an exporter
  /// gone, or an exporter in this very process.
  explicit ImportedPool(int fd, const ImportOptions& options = ImportOptions{});
  /// Synchronizes the device, unmaps everything and frees the VA.
  ~ImportedPool();
  ImportedPool(const ImportedPool&) = delete;
  ImportedPool& operator=(const ImportedPool&) = delete;

  /// Maps the exported block's memory (the chunks under it, as the exporter
  /// has them now) and returns its address here. cudaErrorInvalidValue for
  /// malformed data, data of another pool, a block freed since (stale), or
  /// an exporter gone; nothing changes then.
  cudaError_t import_pointer(const cudaMemPoolPtrExportData& data, void** ptr) noexcept;
  /// The importer's free: synchronizes `stream` (work on it may still read
  /// the block), then unmaps the chunks no other imported block uses.
  /// cudaErrorInvalidValue for a pointer this pool did not import.
  cudaError_t free_pointer(void* ptr, cudaStream_t stream) noexcept;
  /// Access for mappings made from now on, and those already made:
  /// cudaMemAccessFlagsProtRead or ...ProtReadWrite (else cudaErrorInvalidValue).
  cudaError_t set_access(cudaMemAccessFlags flags) noexcept;
  cudaMemAccessFlags access() const noexcept;
  int device() const noexcept;
  /// True when `ptr` lies in this pool's addresses here.
  bool contains(const void* ptr) const noexcept;

 private:
  std::unique_ptr<ipc_detail::ImporterImpl> impl_;
};

}  // namespace sova
