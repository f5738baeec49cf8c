// The allocation log: per-thread buffers, a flush that merges them in time
// order, and a background thread that samples reserved memory and flushes
// (alloc_log.hpp says why rows come out in causal order).
#include "core/alloc_log.hpp"

#include "base/no_destroy.hpp"
#include "core/spin_lock.hpp"

#include <sova/pool.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace sova::detail {

constinit std::atomic<bool> g_log_on{false};

namespace {

// A thread whose buffer reaches kWakeWriterAt records wakes the writer
// thread, which formats and writes off the allocating threads. Only a thread
// whose buffer reaches kWriteItselfAt (the writer has fallen that far behind)
// writes the batch itself: memory stays bounded (~3 MiB a thread) and the
// program slows to the writer's pace rather than the log growing without end.
constexpr std::size_t kWakeWriterAt = 4096;
constexpr std::size_t kWriteItselfAt = 16 * kWakeWriterAt;
constexpr auto kSampleEvery = std::chrono::milliseconds(10);
constexpr int kFlushEverySamples = 10;  // the writer's flush without a wake-up: every 100 ms

enum class Action : std::uint8_t { allocate, allocate_failure, free };

struct Record {
  std::uint64_t ns;  // CLOCK_MONOTONIC
  std::uint64_t ptr;
  std::uint64_t size;
  std::uint64_t stream;
  std::uint64_t reserved;
  std::uint32_t tid;
  Action action;
};

struct ThreadBuffer {
  SpinLock lock;
  std::vector<Record> records;  // under lock; in stamp order
  std::uint32_t tid = 0;
  bool orphan = false;  // under State::mutex: its thread has exited
};

std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

struct State {
  // Guards the file, the buffer list, start/stop. Flushes hold it while
  // they write, so writes never interleave.
  std::mutex mutex;
  std::FILE* file = nullptr;
  bool write_error = false;
  std::int64_t wall_minus_mono = 0;  // realtime - monotonic at start, ns
  std::vector<ThreadBuffer*> buffers;
  // Formatting cache: the local time's "HH:MM:SS" of one second.
  std::int64_t cached_second = -1;
  char cached_hms[16] = {};

  // The background thread and its stop flag (under mutex).
  std::thread worker;
  std::condition_variable wake;
  bool stop_worker = false;
  std::atomic<bool> flush_wanted{false};  // a buffer reached kWakeWriterAt
  std::string text;                       // formatting buffer, under mutex
  std::vector<Record> batch;              // a flush's records, under mutex

  // Pools whose reserved memory the worker sums.
  std::mutex pools_mutex;
  std::set<const Pool*> pools;
  std::atomic<std::uint64_t> reserved{0};

  bool atexit_registered = false;  // under mutex
  // The open log's path (under mutex), for the message when the log stopped
  // at exit could not be written: no caller receives log_stop's code then.
  char path[512] = {};
};

State& state() noexcept {
  static NoDestroy<State> s;  // outlives pools destroyed at exit
  return s.get();
}

/// The calling thread's buffer. Its destructor (at thread exit) hands the
/// buffer to the next flush, which writes what is left and deletes it.
struct ThreadSlot {
  ThreadBuffer* buffer = nullptr;
  ~ThreadSlot() {
    if (buffer == nullptr) return;
    State& s = state();
    std::lock_guard lock(s.mutex);
    buffer->orphan = true;
  }
};
thread_local ThreadSlot t_slot;

ThreadBuffer* thread_buffer() noexcept {
  if (t_slot.buffer != nullptr) return t_slot.buffer;
  try {
    auto* b = new ThreadBuffer;
    b->records.reserve(kWakeWriterAt * 2);
    b->tid = static_cast<std::uint32_t>(::syscall(SYS_gettid));
    State& s = state();
    std::lock_guard lock(s.mutex);
    s.buffers.push_back(b);
    t_slot.buffer = b;
    return b;
  } catch (...) {
    return nullptr;  // out of host memory: this event goes unlogged
  }
}

// Formatting by hand into a char buffer: snprintf/fprintf cost ~0.8 us a row
// (measured on the host), more than the allocation being logged.
constexpr std::size_t kMaxRow = 160;  // the longest row: 7 fields of at most 20 characters, and commas

char* put_decimal(char* p, std::uint64_t v) {
  char digits[20];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  while (n > 0) *p++ = digits[--n];
  return p;
}

/// 0x-prefixed lower-case hex, as glibc's %p prints a non-null pointer.
char* put_hex(char* p, std::uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  char digits[16];
  int n = 0;
  do {
    digits[n++] = kHex[v & 0xF];
    v >>= 4;
  } while (v != 0);
  *p++ = '0';
  *p++ = 'x';
  while (n > 0) *p++ = digits[--n];
  return p;
}

char* put_text(char* p, const char* text) {
  while (*text != '\0') *p++ = *text++;
  return p;
}

/// "HH:MM:SS.uuuuuu", local time, as spdlog's %H:%M:%S.%f. State::mutex held.
char* put_time(State& s, char* p, std::uint64_t mono_ns) {
  const std::int64_t wall = static_cast<std::int64_t>(mono_ns) + s.wall_minus_mono;
  const std::int64_t second = wall / 1000000000;
  if (second != s.cached_second) {
    const std::time_t t = static_cast<std::time_t>(second);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::strftime(s.cached_hms, sizeof s.cached_hms, "%H:%M:%S", &tm);
    s.cached_second = second;
  }
  p = put_text(p, s.cached_hms);
  *p++ = '.';
  std::uint64_t micros = static_cast<std::uint64_t>((wall % 1000000000) / 1000);
  for (int i = 5; i >= 0; --i) {
    p[i] = static_cast<char>('0' + micros % 10);
    micros /= 10;
  }
  return p + 6;
}

/// One row (Thread,Time,Action,Pointer,Size,Stream,Reserved) at p, which has
/// room for kMaxRow characters; returns its end.
char* put_row(State& s, char* p, const Record& r) {
  p = put_decimal(p, r.tid);
  *p++ = ',';
  p = put_time(s, p, r.ns);
  p = put_text(p, r.action == Action::allocate           ? ",allocate,"
                  : r.action == Action::allocate_failure ? ",allocate failure,"
                                                         : ",free,");
  p = r.ptr == 0 ? put_text(p, "(nil)") : put_hex(p, r.ptr);  // (nil): glibc's %p of NULL, as RMM prints it
  *p++ = ',';
  p = put_decimal(p, r.size);
  *p++ = ',';
  // RMM prints the stream with std::hex << cudaStream_t: a null handle as 0.
  p = r.stream == 0 ? put_text(p, "0") : put_hex(p, r.stream);
  *p++ = ',';
  p = put_decimal(p, r.reserved);
  *p++ = '\n';
  return p;
}

/// Writes the records of every buffer stamped before now (`all`: every
/// record, for the last flush, when no append can stamp any more). State::mutex held.
void flush_locked(State& s, bool all = false) {
  if (s.file == nullptr) return;
  const std::uint64_t cutoff = all ? UINT64_MAX : monotonic_ns();
  std::vector<Record>& batch = s.batch;
  batch.clear();
  std::vector<std::size_t> segments;  // where each buffer's records start in batch
  for (auto it = s.buffers.begin(); it != s.buffers.end();) {
    ThreadBuffer* b = *it;
    b->lock.lock();
    const auto end =
        all ? b->records.end()
            : std::find_if(b->records.begin(), b->records.end(), [&](const Record& r) { return r.ns >= cutoff; });
    if (end != b->records.begin()) {
      segments.push_back(batch.size());
      batch.insert(batch.end(), b->records.begin(), end);
      b->records.erase(b->records.begin(), end);
    }
    const bool drop = b->orphan && b->records.empty();
    b->lock.unlock();
    if (drop) {
      delete b;
      it = s.buffers.erase(it);
    } else {
      ++it;
    }
  }
  // Each buffer's records are in stamp order: merge the segments pairwise
  // (nothing to do for one thread). Ties keep buffer order (stable).
  auto by_time = [](const Record& a, const Record& b) { return a.ns < b.ns; };
  segments.push_back(batch.size());
  while (segments.size() > 2) {  // more than one run: join them two by two
    std::vector<std::size_t> next;
    std::size_t i = 0;
    for (; i + 2 < segments.size(); i += 2) {
      std::inplace_merge(batch.begin() + static_cast<std::ptrdiff_t>(segments[i]),
                         batch.begin() + static_cast<std::ptrdiff_t>(segments[i + 1]),
                         batch.begin() + static_cast<std::ptrdiff_t>(segments[i + 2]), by_time);
      next.push_back(segments[i]);
    }
    if (i + 1 < segments.size()) next.push_back(segments[i]);  // an odd run out: carried over
    next.push_back(batch.size());
    segments.swap(next);
  }
  constexpr std::size_t kChunk = 1 << 20;
  s.text.resize(kChunk + kMaxRow);
  char* const begin = s.text.data();
  char* p = begin;
  auto write_out = [&] {
    const std::size_t n = static_cast<std::size_t>(p - begin);
    if (n != 0 && std::fwrite(begin, 1, n, s.file) != n) s.write_error = true;
    p = begin;
  };
  for (const Record& r : batch) {
    p = put_row(s, p, r);
    if (static_cast<std::size_t>(p - begin) >= kChunk) write_out();
  }
  write_out();
  if (std::fflush(s.file) != 0) s.write_error = true;
}

void flush_all() noexcept {
  State& s = state();
  try {
    std::lock_guard lock(s.mutex);
    flush_locked(s);
  } catch (...) {
    // Out of host memory while batching: the records stay buffered.
  }
}

/// Sum of every registered pool's reserved memory.
void sample_reserved(State& s) noexcept {
  std::uint64_t sum = 0;
  try {
    std::lock_guard lock(s.pools_mutex);
    for (const Pool* pool : s.pools) sum += pool->stats().reserved_current;
  } catch (...) {
    return;  // keep the last sample
  }
  s.reserved.store(sum, std::memory_order_relaxed);
}

void worker_loop() {
  State& s = state();
  auto last_sample = std::chrono::steady_clock::now();
  int samples = 0;
  std::unique_lock lock(s.mutex);
  while (!s.stop_worker) {
    s.wake.wait_for(lock, kSampleEvery,
                    [&] { return s.stop_worker || s.flush_wanted.load(std::memory_order_relaxed); });
    if (s.stop_worker) break;
    bool flush = s.flush_wanted.exchange(false, std::memory_order_relaxed);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_sample >= kSampleEvery) {
      last_sample = now;
      lock.unlock();
      sample_reserved(s);
      lock.lock();
      if (++samples % kFlushEverySamples == 0) flush = true;
    }
    if (flush) {
      try {
        flush_locked(s);
      } catch (...) {
      }
    }
  }
}

void append(Action action, std::uint64_t ptr, std::uint64_t size_bytes, cudaStream_t stream) noexcept {
  ThreadBuffer* b = thread_buffer();
  if (b == nullptr) return;
  State& s = state();
  b->lock.lock();
  if (!g_log_on.load(std::memory_order_relaxed)) {  // stopped since the caller looked
    b->lock.unlock();
    return;
  }
  std::size_t size = 0;
  try {
    b->records.push_back(Record{monotonic_ns(), ptr, size_bytes, reinterpret_cast<std::uint64_t>(stream),
                                s.reserved.load(std::memory_order_relaxed), b->tid, action});
    size = b->records.size();
  } catch (...) {
    // Out of host memory growing a buffer that a flush could not drain.
  }
  b->lock.unlock();
  if (size == kWakeWriterAt) [[unlikely]] {
    s.flush_wanted.store(true, std::memory_order_relaxed);
    s.wake.notify_one();
  } else if (size >= kWriteItselfAt) [[unlikely]] {
    flush_all();
  }
}

void stop_at_exit() {
  char path[sizeof State::path];
  {
    State& s = state();
    std::lock_guard lock(s.mutex);
    std::memcpy(path, s.path, sizeof path);
  }
  if (log_stop() == cudaErrorUnknown) {
    std::fprintf(stderr, "sova: the allocation log %s could not be written completely (a full disk?)\n", path);
  }
}

/// In a forked child only the forking thread exists: no writer thread, the
/// file is the parent's, and any lock another thread held stays held. The
/// child stops logging (silently; the parent's log goes on) and gets fresh
/// locks. What the parent's threads had is left alone (leaked), never freed
/// or written twice.
void after_fork_in_child() noexcept {
  g_log_on.store(false, std::memory_order_relaxed);
  State& s = state();
  ::new (static_cast<void*>(&s.mutex)) std::mutex();
  ::new (static_cast<void*>(&s.pools_mutex)) std::mutex();
  ::new (static_cast<void*>(&s.wake)) std::condition_variable();
  ::new (static_cast<void*>(&s.worker)) std::thread();
  ::new (static_cast<void*>(&s.buffers)) std::vector<ThreadBuffer*>();
  s.file = nullptr;
  s.stop_worker = false;
  s.flush_wanted.store(false, std::memory_order_relaxed);
  t_slot.buffer = nullptr;
}

}  // namespace

void log_allocate(void* ptr, std::size_t bytes, cudaStream_t stream, cudaError_t result) noexcept {
  if (result == cudaSuccess) {
    append(Action::allocate, reinterpret_cast<std::uint64_t>(ptr), bytes, stream);
  } else {
    append(Action::allocate_failure, 0, bytes, stream);
  }
}

void log_free(void* ptr, std::size_t bytes, cudaStream_t stream) noexcept {
  append(Action::free, reinterpret_cast<std::uint64_t>(ptr), bytes, stream);
}

void log_register_pool(const Pool* pool) noexcept {
  State& s = state();
  try {
    std::lock_guard lock(s.pools_mutex);
    s.pools.insert(pool);
  } catch (...) {
    // Not summed into Reserved: the log's figure is then low, nothing else.
  }
}

void log_unregister_pool(const Pool* pool) noexcept {
  State& s = state();
  std::lock_guard lock(s.pools_mutex);
  s.pools.erase(pool);
}

cudaError_t log_start(const char* path, char* why, std::size_t why_size) noexcept {
  // The refusal's words go to `why`, where the caller wants them (the C
  // API's last error); the code is the same either way.
  const bool say = why != nullptr && why_size > 0;
  if (path == nullptr || *path == '\0') {
    if (say) {
      std::snprintf(why, why_size, "no path given (%s); pass the file to write the log to",
                    path == nullptr ? "NULL" : "empty");
    }
    return cudaErrorInvalidValue;
  }
  State& s = state();
  try {
    std::lock_guard lock(s.mutex);
    if (s.file != nullptr) {
      if (say) {
        std::snprintf(why, why_size,
                      "a log is already running, to %s; stop it first (sovaLogStop), then start the new one", s.path);
      }
      return cudaErrorInvalidValue;
    }
    std::FILE* file = std::fopen(path, "w");
    if (file == nullptr) {
      const int error = errno;
      if (say) {
        std::snprintf(why, why_size,
                      "cannot open %s for writing (%s); give a path in a directory that exists and is writable", path,
                      std::strerror(error));
      }
      return cudaErrorInvalidValue;
    }
    // Large stdio buffer: a batch is written with one or a few write calls.
    std::setvbuf(file, nullptr, _IOFBF, 1 << 20);
    std::fputs("Thread,Time,Action,Pointer,Size,Stream,Reserved\n", file);
    s.file = file;
    s.write_error = false;
    std::snprintf(s.path, sizeof s.path, "%s", path);
    s.wall_minus_mono = static_cast<std::int64_t>(realtime_ns()) - static_cast<std::int64_t>(monotonic_ns());
    s.cached_second = -1;
    s.stop_worker = false;
    if (!s.atexit_registered) {
      s.atexit_registered = std::atexit(stop_at_exit) == 0;
      ::pthread_atfork(nullptr, nullptr, after_fork_in_child);
    }
    try {
      s.worker = std::thread(worker_loop);
    } catch (...) {
      std::fclose(file);
      s.file = nullptr;
      return cudaErrorMemoryAllocation;
    }
  } catch (...) {
    return cudaErrorMemoryAllocation;
  }
  sample_reserved(s);
  g_log_on.store(true, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t log_stop() noexcept {
  State& s = state();
  std::thread worker;
  {
    std::lock_guard lock(s.mutex);
    if (s.file == nullptr) return cudaSuccess;
    g_log_on.store(false, std::memory_order_release);
    s.stop_worker = true;
    worker = std::move(s.worker);
  }
  s.wake.notify_all();
  if (worker.joinable()) worker.join();
  std::lock_guard lock(s.mutex);
  // Every append that saw the log on holds its buffer's lock while it
  // appends, and flush_locked takes each lock: once the flag is off, what it
  // finds is everything, so it takes every record.
  try {
    flush_locked(s, true);
  } catch (...) {
    s.write_error = true;
  }
  for (ThreadBuffer* b : s.buffers) {  // anything left (out of memory above)
    b->lock.lock();
    b->records.clear();
    b->lock.unlock();
  }
  const bool failed = std::fclose(s.file) != 0 || s.write_error;
  s.file = nullptr;
  return failed ? cudaErrorUnknown : cudaSuccess;
}

void log_start_from_environment() noexcept {
  static std::once_flag once;
  try {
    std::call_once(once, [] {
      const char* path = std::getenv("SOVA_LOG");
      if (path == nullptr || *path == '\0') return;
      const cudaError_t err = log_start(path);
      if (err != cudaSuccess && err != cudaErrorInvalidValue) return;
      if (err == cudaErrorInvalidValue && !g_log_on.load()) {
        std::fprintf(stderr, "sova: SOVA_LOG=%s: cannot open the file for writing; not logging\n", path);
      }
    });
  } catch (...) {
  }
}

}  // namespace sova::detail
