// The allocation log (sovaLogStart / SOVA_LOG; docs/c-api.md, "The allocation
// log"): every allocation and free of every sova::Pool in the process, as the
// CSV rmm::mr::logging_resource_adaptor writes
//
//   Thread,Time,Action,Pointer,Size,Stream,Reserved
//
// (RMM's six columns, then the physical memory all pools held, sampled every
// 10 ms: what tools/plot_log.py draws). bench/replay reads it as a trace.
//
// Order. Rows are written in the order of one clock read per event, taken
// under the thread's own buffer lock: an allocation's after the pool handed
// out the block, a free's before the pool takes the block back. So an
// allocation's row always precedes the rows of its free and of the block's
// next allocation, whatever threads they run on; a replay in file order
// never frees a pointer before it was allocated. A flush takes the time T
// first and then, buffer by buffer, the records stamped before T: a record
// stamped before T is in its buffer by then (stamped and appended under the
// buffer's lock), and one appended later is stamped after T. Batches are
// sorted by time, so the file is in time order.
//
// Cost with the log off: one relaxed load of a global flag per Pool call.
// With it on, per event on the calling thread: the thread's own spin lock
// (uncontended but for the writer's brief visits), a clock read
// (CLOCK_MONOTONIC) and a 48-byte append, plus block_size() for a free. A
// background thread merges the buffers, formats the rows (by hand: printf
// cost more than the allocation) and writes them: woken when a buffer holds
// 4096 records, and every 100 ms. A thread writes the batch itself only when
// the writer has fallen 64K records behind it, which bounds the memory and
// slows the program to the writer's pace.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>

namespace sova {
class Pool;
}

namespace sova::detail {

/// True while a log is open. Relaxed: a call racing with start or stop may
/// or may not be logged.
extern std::atomic<bool> g_log_on;
inline bool log_on() noexcept { return g_log_on.load(std::memory_order_relaxed); }

/// After an allocation: `result` cudaSuccess logs `allocate` (RMM logs
/// size-0 allocations too, with a null pointer), any error `allocate failure`.
void log_allocate(void* ptr, std::size_t bytes, cudaStream_t stream, cudaError_t result) noexcept;
/// Before a free that will succeed: `bytes` is the block's requested size.
void log_free(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept;

/// Every Pool registers at construction and leaves at destruction, so that
/// the sampler can read reserved memory (Pool::stats) while the pool lives.
void log_register_pool(const Pool* pool) noexcept;
void log_unregister_pool(const Pool* pool) noexcept;

/// sovaLogStart / sovaLogStop (lib/capi/capi_log.cpp): see sova.h. A
/// refused start writes why, and what to do, into `why` (`why_size` bytes,
/// where given): no path, a log already running (and to which file), or the
/// file that cannot be opened (the system's reason).
cudaError_t log_start(const char* path, char* why = nullptr, std::size_t why_size = 0) noexcept;
cudaError_t log_stop() noexcept;
/// SOVA_LOG: starts the log when it is set, non-empty and no log runs; says
/// on stderr when the file cannot be opened. Once per process.
void log_start_from_environment() noexcept;

}  // namespace sova::detail
