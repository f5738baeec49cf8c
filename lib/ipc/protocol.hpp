// sova IPC — the messages between an importer and the exporter's server
// thread, over one SOCK_SEQPACKET Unix socket per importer (a socketpair the
// exporter made; the importer's end is the pool's shareable handle), and the
// 64 bytes of pointer export data. docs/ipc.md describes the exchange.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace sova::ipc_detail {

inline constexpr std::uint32_t kMagic = 0x50495653;  // "SVIP"
inline constexpr std::uint16_t kVersion = 1;
/// Chunks (and descriptors) per reply message; SCM_RIGHTS allows 253.
inline constexpr std::uint32_t kChunksPerMessage = 64;

enum class Kind : std::uint16_t { hello = 1, info = 2, map = 3, chunks = 4 };

struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  Kind kind{};
};

/// importer -> exporter: who I am. exporter -> importer: the pool.
struct Hello {
  Header h{kMagic, kVersion, Kind::hello};
  std::int64_t pid = 0;
};
struct Info {
  Header h{kMagic, kVersion, Kind::info};
  std::int64_t exporter_pid = 0;
  std::uint64_t pool_token = 0;
  std::uint64_t va_size = 0;
  std::uint64_t granularity = 0;
  std::int32_t device = 0;
  std::uint32_t handle_types = 0;
};

/// cudaMemPoolPtrExportData's 64 bytes, as sova fills them.
struct PointerData {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t zero = 0;
  std::uint64_t pool_token = 0;
  std::uint64_t offset = 0;  ///< from the pool's VA base
  std::uint64_t size = 0;    ///< the block's requested bytes
  std::uint64_t block_token = 0;
  std::uint64_t check = 0;  ///< checksum() of the fields above
  std::uint8_t pad[16] = {};
};
static_assert(sizeof(PointerData) == sizeof(cudaMemPoolPtrExportData));

/// A cheap mix of the fields, so that a corrupted or hand-made buffer is
/// told from export data (not a secret: the tokens are the guard).
inline std::uint64_t checksum(const PointerData& d) noexcept {
  std::uint64_t x = 0x9e3779b97f4a7c15ull ^ d.magic ^ (std::uint64_t{d.version} << 32);
  for (std::uint64_t v : {d.pool_token, d.offset, d.size, d.block_token}) {
    x ^= v + 0x9e3779b97f4a7c15ull + (x << 6) + (x >> 2);
  }
  return x;
}

/// importer -> exporter: the chunks under an exported block, please.
struct MapRequest {
  Header h{kMagic, kVersion, Kind::map};
  PointerData data{};
};

/// exporter -> importer, one or more: `count` entries follow in the same
/// message, with as many descriptors (SCM_RIGHTS), in address order.
struct ChunksReply {
  Header h{kMagic, kVersion, Kind::chunks};
  std::int32_t status = cudaSuccess;  ///< a cudaError_t; nothing follows unless cudaSuccess
  std::uint32_t total = 0;            ///< chunks in the whole answer
  std::uint32_t count = 0;            ///< chunks in this message
  std::uint32_t more = 0;             ///< another message follows
};
struct ChunkEntry {
  std::uint64_t offset = 0;  ///< from the pool's VA base
  std::uint64_t bytes = 0;
  std::uint64_t serial = 0;  ///< the exporter's chunk identity (never reused in the pool)
};

/// Sends `bytes` of `data` with `fds` (may be none). False on any error.
bool send_message(int socket, const void* data, std::size_t bytes, const int* fds, std::size_t nfds) noexcept;
/// Receives one message into `data` (up to `capacity`) and up to
/// `max_fds` descriptors (close-on-exec). Returns the bytes received, 0 when
/// the peer is gone, -1 on error; *nfds is set.
long receive_message(int socket, void* data, std::size_t capacity, int* fds, std::size_t max_fds,
                     std::size_t* nfds) noexcept;
/// How long an importer waits for each answer of the exporter before taking
/// it for gone: an exporter that stopped, or a socket nobody answers on, must
/// not hang the importer (the exporter's replies give up after 5 s likewise).
constexpr int kAnswerWaitMs = 10000;
/// receive_message, after waiting at most `wait_ms` for the message: -1 when
/// none came by then (nothing is read).
long receive_message_within(int socket, int wait_ms, void* data, std::size_t capacity, int* fds,
                            std::size_t max_fds, std::size_t* nfds) noexcept;

}  // namespace sova::ipc_detail
