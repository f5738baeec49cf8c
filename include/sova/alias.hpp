// sova — a second virtual address for a block: the same physical memory
// mapped again elsewhere (the CUDA programming guide's virtual aliasing).
//
// Coherence rules (docs/vmm.md, "Aliases"), the guide's:
//  * Work ordered after other work (later in the same stream, or after an
//    event, a stream wait or a synchronize) sees every write the earlier work
//    made through either address: write through one view in one kernel, read
//    through the other in a later one.
//  * Within one kernel (or between kernels running at the same time),
//    accesses to the same bytes through the two addresses are not kept
//    coherent: a write through one address and a read through the other
//    there need the PTX fence.proxy.alias between them, else the read may
//    see stale data. Keep each kernel to one view, or fence.
//  * The alias is valid while the block is live: destroy it before the
//    block is freed (afterwards the pool may hand the memory to another
//    block, which the alias would then see and change).
#pragma once

#include <sova/export.h>
#include <sova/pool.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sova {

class SOVA_API BlockAlias {
 public:
  /// Maps the physical chunks under the live block at `ptr` (its start) of
  /// `pool` at a new VA range, with `access` for the pool's device. Throws
  /// Error: cudaErrorInvalidValue for anything but a live block's start or
  /// an access other than read / read-write; the driver's error otherwise
  /// (nothing is left mapped then).
  BlockAlias(Pool& pool, void* ptr, cudaMemAccessFlags access = cudaMemAccessFlagsProtReadWrite);
  /// Synchronizes the pool's device, then unmaps the view and frees its VA.
  ~BlockAlias();
  BlockAlias(const BlockAlias&) = delete;
  BlockAlias& operator=(const BlockAlias&) = delete;

  /// The block's bytes at the second address: data()[i] is ptr[i].
  void* data() const noexcept { return reinterpret_cast<void*>(base_ + offset_); }
  void* block() const noexcept { return block_; }
  std::size_t size() const noexcept { return size_; }

 private:
  Driver& driver_;
  int device_;
  void* block_;
  std::size_t size_;
  std::uintptr_t base_ = 0;                                  ///< the alias's reservation
  std::size_t span_ = 0;                                     ///< its bytes: the chunks under the block, whole
  std::size_t offset_ = 0;                                   ///< the block's start within it
  std::vector<std::pair<std::size_t, std::size_t>> mapped_;  ///< (offset in the span, bytes)
};

}  // namespace sova
