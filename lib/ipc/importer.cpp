// ImportedPool: the importer's side. It mirrors the exporter pool's VA layout
// in a reservation of its own (a block at offset X there is at base + X
// here) and maps each chunk the exporter names at the chunk's offset, one
// mapping per chunk however many imported blocks lie on it (a chunk is
// mapped whole: the driver maps no part of a physical allocation).
//
// What it knows of the exporter's chunks is what the last answer said: a
// chunk is identified by its serial, and its place by its offset. A mapping
// that no imported block uses is unmapped at once (free_pointer), so a chunk
// the exporter moved or released later is never seen here through an old
// mapping; a new import asks again and maps what is there now.
#include <sova/ipc.hpp>

#include "ipc/protocol.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace sova::ipc_detail {

class ImporterImpl {
 public:
  ImporterImpl(int fd, const ImportOptions& options)
      : driver_(options.driver != nullptr ? *options.driver : process_driver()), access_(options.access) {
    if (options.access != cudaMemAccessFlagsProtRead && options.access != cudaMemAccessFlagsProtReadWrite) {
      throw Error("sova: imported pools are mapped read-only or read-write", cudaErrorInvalidValue);
    }
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0)
      throw Error("sova: the pool handle is not an open descriptor", cudaErrorInvalidValue);
    if (!S_ISSOCK(st.st_mode)) throw Error("sova: the descriptor is not a sova pool handle", cudaErrorInvalidValue);
    socket_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (socket_ < 0) throw Error("sova: out of descriptors", cudaErrorMemoryAllocation);
    try {
      connect(options);
    } catch (...) {
      ::close(socket_);
      throw;
    }
  }

  ~ImporterImpl() {
    driver_.device_synchronize(device_);
    for (const auto& [offset, m] : mapped_) driver_.unmap(base_ + offset, m.bytes);
    driver_.address_free(base_, info_.va_size);
    ::close(socket_);
  }

  cudaError_t import_pointer(const cudaMemPoolPtrExportData& raw, void** ptr) noexcept {
    if (ptr == nullptr) return cudaErrorInvalidValue;
    const auto d = std::bit_cast<PointerData>(raw);
    if (d.magic != kMagic || d.version != kVersion || d.check != checksum(d)) return cudaErrorInvalidValue;
    // The bytes the checksum does not cover are zero in export data: any other
    // value is a changed copy, refused like one the checksum catches.
    if (d.zero != 0 || std::any_of(std::begin(d.pad), std::end(d.pad), [](std::uint8_t b) { return b != 0; }))
      return cudaErrorInvalidValue;
    if (d.pool_token != info_.pool_token) return cudaErrorInvalidValue;  // another pool's
    if (d.size == 0 || d.offset >= info_.va_size || d.size > info_.va_size - d.offset) return cudaErrorInvalidValue;
    std::lock_guard lock(mutex_);
    if (auto it = imports_.find(d.offset); it != imports_.end()) {
      // Imported already and not freed: the same block gives the same address
      // (one free_pointer frees it); another block there means the exporter
      // freed it before this process did, which the ordering rules forbid.
      if (it->second.block_token != d.block_token) return cudaErrorInvalidValue;
      *ptr = reinterpret_cast<void*>(base_ + d.offset);
      return cudaSuccess;
    }
    std::vector<ChunkEntry> chunks;
    std::vector<int> fds;
    const cudaError_t asked = ask(d, &chunks, &fds);
    if (asked != cudaSuccess) {
      for (int fd : fds) ::close(fd);
      return asked;
    }
    // Map each chunk not mapped already; on any failure undo this call's work.
    std::vector<std::uint64_t> taken;  // offsets whose refs this call raised
    cudaError_t status = cudaSuccess;
    for (std::size_t i = 0; i < chunks.size() && status == cudaSuccess; ++i) {
      status = take(chunks[i], fds[i]);
      if (status == cudaSuccess) taken.push_back(chunks[i].offset);
    }
    for (int fd : fds) ::close(fd);
    if (status == cudaSuccess) {
      try {
        imports_[d.offset] = Import{d.block_token, taken};
      } catch (...) {
        status = cudaErrorMemoryAllocation;
      }
    }
    if (status != cudaSuccess) {
      for (std::uint64_t offset : taken) drop(offset);
      return status;
    }
    *ptr = reinterpret_cast<void*>(base_ + d.offset);
    return cudaSuccess;
  }

  cudaError_t free_pointer(void* ptr, cudaStream_t stream) noexcept {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(ptr);
    if (!contains(ptr)) return cudaErrorInvalidValue;
    std::lock_guard lock(mutex_);
    auto it = imports_.find(a - base_);
    if (it == imports_.end()) return cudaErrorInvalidValue;
    // Work on `stream` may still read the block: unmapping under it would fault.
    if (const cudaError_t err = driver_.stream_synchronize(stream); err != cudaSuccess) return err;
    for (std::uint64_t offset : it->second.chunks) drop(offset);
    imports_.erase(it);
    return cudaSuccess;
  }

  cudaError_t set_access(cudaMemAccessFlags flags) noexcept {
    if (flags != cudaMemAccessFlagsProtRead && flags != cudaMemAccessFlagsProtReadWrite) return cudaErrorInvalidValue;
    std::lock_guard lock(mutex_);
    const cudaMemAccessDesc desc = access_desc(flags);
    for (const auto& [offset, m] : mapped_) {
      if (const cudaError_t err = driver_.set_access(base_ + offset, m.bytes, &desc, 1); err != cudaSuccess) {
        // Put back what was changed so far.
        const cudaMemAccessDesc old = access_desc(access_);
        for (const auto& [o2, m2] : mapped_) {
          if (o2 == offset) break;
          driver_.set_access(base_ + o2, m2.bytes, &old, 1);
        }
        return err;
      }
    }
    access_ = flags;
    return cudaSuccess;
  }

  cudaMemAccessFlags access() noexcept {
    std::lock_guard lock(mutex_);
    return access_;
  }
  int device() const noexcept { return device_; }
  bool contains(const void* ptr) const noexcept {
    return reinterpret_cast<std::uintptr_t>(ptr) - base_ < info_.va_size;
  }

 private:
  struct Import {
    std::uint64_t block_token = 0;
    std::vector<std::uint64_t> chunks;  ///< offsets of the chunks it raised the refs of
  };
  struct Mapping {
    std::uint64_t bytes = 0;
    std::uint64_t serial = 0;
    std::uint32_t refs = 0;
  };

  void connect(const ImportOptions& options) {
    Hello hello;
    hello.pid = ::getpid();
    if (!send_message(socket_, &hello, sizeof hello, nullptr, 0)) {
      throw Error("sova: the pool's exporter is gone (or the descriptor is no sova pool handle)",
                  cudaErrorInvalidValue);
    }
    Info info;
    std::size_t nfds = 0;
    int fds[kChunksPerMessage];
    const long got = receive_message_within(socket_, kAnswerWaitMs, &info, sizeof info, fds, kChunksPerMessage, &nfds);
    for (std::size_t i = 0; i < nfds; ++i) ::close(fds[i]);
    if (got != static_cast<long>(sizeof info) || info.h.magic != kMagic || info.h.kind != Kind::info) {
      throw Error("sova: no answer from the pool's exporter (gone, or not a sova pool handle)", cudaErrorInvalidValue);
    }
    if (info.exporter_pid == ::getpid()) {
      throw Error("sova: a pool cannot be imported into the process that exports it", cudaErrorInvalidValue);
    }
    if (info.granularity == 0 || info.va_size == 0 || info.va_size % info.granularity != 0) {
      throw Error("sova: malformed answer from the pool's exporter", cudaErrorInvalidValue);
    }
    info_ = info;
    device_ = options.device >= 0 ? options.device : info.device;
    if (const cudaError_t err = driver_.address_reserve(info.va_size, info.granularity, &base_); err != cudaSuccess) {
      throw Error(std::string("sova: reserving VA for an imported pool failed: ") + cudaGetErrorName(err), err);
    }
  }

  cudaMemAccessDesc access_desc(cudaMemAccessFlags flags) const noexcept {
    cudaMemAccessDesc d{};
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = device_;
    d.flags = flags;
    return d;
  }

  /// One map request and its answer: the chunks and their descriptors.
  cudaError_t ask(const PointerData& d, std::vector<ChunkEntry>* chunks, std::vector<int>* fds) noexcept {
    // An answer that did not come in time may still come: it would be read as
    // the answer to the next request, so the exporter is taken for gone.
    if (gone_) return cudaErrorInvalidValue;
    MapRequest request;
    request.data = d;
    if (!send_message(socket_, &request, sizeof request, nullptr, 0)) return cudaErrorInvalidValue;  // exporter gone
    try {
      for (;;) {
        struct {
          ChunksReply r;
          ChunkEntry e[kChunksPerMessage];
        } msg;
        int got_fds[kChunksPerMessage];
        std::size_t nfds = 0;
        const long got =
            receive_message_within(socket_, kAnswerWaitMs, &msg, sizeof msg, got_fds, kChunksPerMessage, &nfds);
        fds->insert(fds->end(), got_fds, got_fds + nfds);
        if (got < 0) gone_ = true;  // no answer in time, or the socket failed
        if (got < static_cast<long>(sizeof(ChunksReply)) || msg.r.h.magic != kMagic || msg.r.h.kind != Kind::chunks) {
          return cudaErrorInvalidValue;  // exporter gone mid-answer
        }
        if (msg.r.status != cudaSuccess) return static_cast<cudaError_t>(msg.r.status);
        if (msg.r.count > kChunksPerMessage || nfds != msg.r.count ||
            static_cast<std::size_t>(got) != sizeof(ChunksReply) + msg.r.count * sizeof(ChunkEntry)) {
          return cudaErrorInvalidValue;
        }
        chunks->insert(chunks->end(), msg.e, msg.e + msg.r.count);
        if (!msg.r.more) break;
      }
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
    for (const ChunkEntry& c : *chunks) {
      if (c.bytes == 0 || c.offset % info_.granularity != 0 || c.bytes % info_.granularity != 0 ||
          c.offset >= info_.va_size || c.bytes > info_.va_size - c.offset) {
        return cudaErrorInvalidValue;
      }
    }
    return chunks->empty() ? cudaErrorInvalidValue : cudaSuccess;
  }

  /// Maps chunk `c` (descriptor `fd`) unless it is mapped already; raises its refs.
  cudaError_t take(const ChunkEntry& c, int fd) noexcept {
    auto it = mapped_.find(c.offset);
    if (it != mapped_.end() && it->second.serial == c.serial && it->second.bytes == c.bytes) {
      ++it->second.refs;
      return cudaSuccess;
    }
    // Anything else mapped across [offset, offset + bytes) is in use by a
    // live import (unused mappings are unmapped at once): the exporter has
    // moved memory an import here still uses, which the ordering rules forbid.
    auto next = mapped_.lower_bound(c.offset);
    if (next != mapped_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.bytes > c.offset) return cudaErrorInvalidValue;
    }
    if (next != mapped_.end() && next->first < c.offset + c.bytes) return cudaErrorInvalidValue;
    PhysicalHandle handle = 0;
    if (const cudaError_t err = driver_.import_posix_fd(fd, &handle); err != cudaSuccess) return err;
    cudaError_t err = driver_.map(base_ + c.offset, c.bytes, handle);
    driver_.physical_release(handle);  // the mapping keeps the memory
    if (err != cudaSuccess) return err;
    const cudaMemAccessDesc desc = access_desc(access_);
    err = driver_.set_access(base_ + c.offset, c.bytes, &desc, 1);
    if (err != cudaSuccess) {
      driver_.unmap(base_ + c.offset, c.bytes);
      return err;
    }
    try {
      mapped_[c.offset] = Mapping{c.bytes, c.serial, 1};
    } catch (...) {
      driver_.unmap(base_ + c.offset, c.bytes);
      return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
  }

  void drop(std::uint64_t offset) noexcept {
    auto it = mapped_.find(offset);
    if (it == mapped_.end() || --it->second.refs != 0) return;
    driver_.unmap(base_ + offset, it->second.bytes);
    mapped_.erase(it);
  }

  Driver& driver_;
  int socket_ = -1;
  bool gone_ = false;  // under mutex_: an answer did not come in time (ask)
  Info info_{};
  int device_ = 0;
  std::uintptr_t base_ = 0;
  std::mutex mutex_;  // one import or free at a time: the socket carries one exchange
  cudaMemAccessFlags access_;
  std::map<std::uint64_t, Mapping> mapped_;  ///< by chunk offset
  std::map<std::uint64_t, Import> imports_;  ///< by block offset
};

}  // namespace sova::ipc_detail

namespace sova {

ImportedPool::ImportedPool(int fd, const ImportOptions& options)
    : impl_(std::make_unique<ipc_detail::ImporterImpl>(fd, options)) {}
ImportedPool::~ImportedPool() = default;
cudaError_t ImportedPool::import_pointer(const cudaMemPoolPtrExportData& data, void** ptr) noexcept {
  return impl_->import_pointer(data, ptr);
}
cudaError_t ImportedPool::free_pointer(void* ptr, cudaStream_t stream) noexcept {
  return impl_->free_pointer(ptr, stream);
}
cudaError_t ImportedPool::set_access(cudaMemAccessFlags flags) noexcept { return impl_->set_access(flags); }
cudaMemAccessFlags ImportedPool::access() const noexcept { return impl_->access(); }
int ImportedPool::device() const noexcept { return impl_->device(); }
bool ImportedPool::contains(const void* ptr) const noexcept { return impl_->contains(ptr); }

}  // namespace sova
