// PoolExporter: a server thread answering each importer's socket.
//
// Nothing is reachable without a descriptor from share(): each is one end of
// a fresh socketpair, and the thread answers only on the other ends. A map
// request names a block by its export data; it is answered only if that
// block was exported (export_pointer) with the same token and not forgotten
// since, and is still a live block: then with the descriptors of the chunks
// under it now. The thread reads the pool only through Pool::chunks_under
// (under the pool's heap lock) and the driver's export call.
#include <sova/ipc.hpp>

#include "ipc/protocol.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

namespace sova::ipc_detail {

namespace {
std::uint64_t random_token() {
  std::random_device rd;
  std::uint64_t t = 0;
  while (t == 0) t = (std::uint64_t{rd()} << 32) ^ rd();
  return t;
}
}  // namespace

class ExporterImpl {
 public:
  explicit ExporterImpl(Pool& pool) : pool_(pool), token_(random_token()) {
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) throw Error("sova: eventfd for the pool exporter failed", cudaErrorMemoryAllocation);
    thread_ = std::thread([this] { serve(); });
  }

  ~ExporterImpl() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake();
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(wake_);
  }

  int share(cudaError_t* error) noexcept {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
      if (error) *error = cudaErrorMemoryAllocation;  // out of descriptors
      return -1;
    }
    // An importer that stops reading must not hang the thread (and with it
    // the exporter's destructor): replies give up after a few seconds.
    const timeval limit{5, 0};
    (void)::setsockopt(fds[0], SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    try {
      std::lock_guard lock(mutex_);
      clients_.push_back(fds[0]);
    } catch (...) {
      ::close(fds[0]);
      ::close(fds[1]);
      if (error) *error = cudaErrorMemoryAllocation;
      return -1;
    }
    wake();
    if (error) *error = cudaSuccess;
    return fds[1];
  }

  cudaError_t export_pointer(const void* ptr, cudaMemPoolPtrExportData* out) noexcept {
    if (out == nullptr) return cudaErrorInvalidValue;
    const std::size_t size = pool_.block_size(ptr);
    if (size == 0) return cudaErrorInvalidValue;  // not a live block
    // Its memory must be exportable now (and stays so while it lives).
    try {
      std::vector<Pool::ChunkView> chunks;
      if (const cudaError_t err = pool_.chunks_under(ptr, size, &chunks); err != cudaSuccess) return err;
      PointerData d;
      d.pool_token = token_;
      d.offset = reinterpret_cast<std::uintptr_t>(ptr) - pool_.va_base();
      d.size = size;
      {
        // Exporting a live block again gives the same data (every importer's
        // copy stays valid); forget() on its free drops it.
        std::lock_guard lock(mutex_);
        auto [it, fresh] = exported_.try_emplace(d.offset, Exported{d.size, 0});
        if (fresh || it->second.size != d.size) it->second = Exported{d.size, random_token()};
        d.block_token = it->second.token;
      }
      d.check = checksum(d);
      std::memcpy(out, &d, sizeof d);
    } catch (const std::bad_alloc&) {
      return cudaErrorMemoryAllocation;
    }
    return cudaSuccess;
  }

  void forget(const void* ptr) noexcept {
    const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(ptr);
    if (a < pool_.va_base()) return;
    std::lock_guard lock(mutex_);
    exported_.erase(a - pool_.va_base());
  }

  Pool& pool() noexcept { return pool_; }

 private:
  struct Exported {
    std::uint64_t size = 0;
    std::uint64_t token = 0;
  };

  void wake() noexcept {
    const std::uint64_t one = 1;
    (void)!::write(wake_, &one, sizeof one);
  }

  void serve() noexcept {
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stop_) return;
        fds.clear();
        fds.push_back(pollfd{wake_, POLLIN, 0});
        for (int c : clients_) fds.push_back(pollfd{c, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;  // EINTR
      if (fds[0].revents != 0) {
        std::uint64_t n;
        (void)!::read(wake_, &n, sizeof n);
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (!answer(fds[i].fd)) drop(fds[i].fd);
      }
    }
  }

  void drop(int fd) noexcept {
    std::lock_guard lock(mutex_);
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      if (*it == fd) {
        clients_.erase(it);
        ::close(fd);
        return;
      }
    }
  }

  /// One request; false when the importer is gone or speaks nonsense.
  bool answer(int fd) noexcept {
    alignas(8) unsigned char buf[256];
    int stray[kChunksPerMessage];
    std::size_t nstray = 0;
    const long got = receive_message(fd, buf, sizeof buf, stray, kChunksPerMessage, &nstray);
    for (std::size_t i = 0; i < nstray; ++i) ::close(stray[i]);  // importers send none
    if (got <= 0 || static_cast<std::size_t>(got) < sizeof(Header)) return false;
    Header h;
    std::memcpy(&h, buf, sizeof h);
    if (h.magic != kMagic || h.version != kVersion) return false;
    if (h.kind == Kind::hello && static_cast<std::size_t>(got) == sizeof(Hello)) {
      Info info;
      info.exporter_pid = ::getpid();
      info.pool_token = token_;
      info.va_size = pool_.va_size();
      info.granularity = pool_.granularity();
      info.device = pool_.device();
      info.handle_types = cudaMemHandleTypePosixFileDescriptor;
      return send_message(fd, &info, sizeof info, nullptr, 0);
    }
    if (h.kind == Kind::map && static_cast<std::size_t>(got) == sizeof(MapRequest)) {
      MapRequest request;
      std::memcpy(&request, buf, sizeof request);
      return map(fd, request.data);
    }
    return false;
  }

  bool reply_error(int fd, cudaError_t status) noexcept {
    ChunksReply r;
    r.status = status;
    return send_message(fd, &r, sizeof r, nullptr, 0);
  }

  bool map(int fd, const PointerData& d) noexcept {
    if (d.pool_token != token_ || d.check != checksum(d)) return reply_error(fd, cudaErrorInvalidValue);
    {
      std::lock_guard lock(mutex_);
      auto it = exported_.find(d.offset);
      if (it == exported_.end() || it->second.token != d.block_token || it->second.size != d.size) {
        return reply_error(fd, cudaErrorInvalidValue);  // never exported, or forgotten: stale
      }
    }
    const void* ptr = reinterpret_cast<const void*>(pool_.va_base() + d.offset);
    std::vector<Pool::ChunkView> chunks;
    try {
      if (pool_.block_size(ptr) != d.size || pool_.chunks_under(ptr, d.size, &chunks) != cudaSuccess) {
        return reply_error(fd, cudaErrorInvalidValue);  // freed since (stale)
      }
    } catch (...) {
      return reply_error(fd, cudaErrorMemoryAllocation);
    }
    const auto total = static_cast<std::uint32_t>(chunks.size());
    for (std::size_t first = 0; first < chunks.size(); first += kChunksPerMessage) {
      const std::size_t n = std::min<std::size_t>(kChunksPerMessage, chunks.size() - first);
      struct {
        ChunksReply r;
        ChunkEntry e[kChunksPerMessage];
      } msg;
      int fds[kChunksPerMessage];
      std::size_t made = 0;
      cudaError_t status = cudaSuccess;
      for (; made < n; ++made) {
        const Pool::ChunkView& c = chunks[first + made];
        status = pool_.driver().export_posix_fd(c.handle, &fds[made]);
        if (status != cudaSuccess) break;
        msg.e[made] = ChunkEntry{c.offset, c.bytes, c.serial};
      }
      if (status != cudaSuccess) {
        for (std::size_t i = 0; i < made; ++i) ::close(fds[i]);
        return reply_error(fd, status);
      }
      msg.r.status = cudaSuccess;
      msg.r.total = total;
      msg.r.count = static_cast<std::uint32_t>(n);
      msg.r.more = first + n < chunks.size() ? 1 : 0;
      const bool ok = send_message(fd, &msg, sizeof(ChunksReply) + n * sizeof(ChunkEntry), fds, n);
      for (std::size_t i = 0; i < n; ++i) ::close(fds[i]);  // the importer holds its own now
      if (!ok) return false;
    }
    return true;
  }

  Pool& pool_;
  const std::uint64_t token_;
  int wake_ = -1;
  std::mutex mutex_;
  bool stop_ = false;
  std::vector<int> clients_;
  std::unordered_map<std::uint64_t, Exported> exported_;  ///< by offset
  std::thread thread_;
};

}  // namespace sova::ipc_detail

namespace sova {

PoolExporter::PoolExporter(Pool& pool) {
  if ((pool.chunk_props().handle_types & cudaMemHandleTypePosixFileDescriptor) == 0) {
    throw Error("sova: the pool was not created with cudaMemHandleTypePosixFileDescriptor: it cannot be exported",
                cudaErrorInvalidValue);
  }
  impl_ = std::make_unique<ipc_detail::ExporterImpl>(pool);
}
PoolExporter::~PoolExporter() = default;
int PoolExporter::share(cudaError_t* error) noexcept { return impl_->share(error); }
cudaError_t PoolExporter::export_pointer(const void* ptr, cudaMemPoolPtrExportData* out) noexcept {
  return impl_->export_pointer(ptr, out);
}
void PoolExporter::forget(const void* ptr) noexcept { impl_->forget(ptr); }
void PoolExporter::deallocate(void* ptr, cudaStream_t stream) {
  impl_->forget(ptr);
  impl_->pool().deallocate(ptr, stream);
}

}  // namespace sova
