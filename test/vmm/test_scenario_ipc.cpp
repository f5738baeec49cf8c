// Scenario tests of sova's IPC (sharing a pool's memory with another
// process), written from the documentation only: docs/ipc.md, docs/c-api.md
// ("The rest of the VMM API"), docs/sleep-wake.md and the comments of
// include/sova/sova.h and include/sova/ipc.hpp. A user porting
// cudaMemPoolExportToShareableHandle / ImportFromShareableHandle /
// ExportPointer / ImportPointer code would write these.
//
// Two real processes: this binary starts itself again to run the hidden test
// case "scenario ipc peer: command server" (as test/conformance/peer_process.hpp
// does). The peer installs its own SimDriver (two devices, device faults
// recorded rather than aborting) as the C API's driver and obeys commands
// sent over a Unix socket: import a pool from a descriptor (SCM_RIGHTS), import
// a pointer, read (a hash of the bytes), write, free, destroy, probe refusals.
// Every reply carries the peer's SimCounters before and after the command,
// so "nothing changed" is checked on the importer's driver too. The exporter
// is this process, on the C API's shared simulation (capi_test::sim()).
//
// Random sequences are seeded: the seed is printed with every failure, and
// SOVA_SCENARIO_SEED=<n> in the environment replays one seed.
#include "support/catch.hpp"
#include "support/capi_stats.hpp"
#include "support/scenario_data.hpp"

#include "capi/capi_test_util.hpp"
#include "conformance/peer_process.hpp"

#include <sova/error.hpp>
#include <sova/ipc.hpp>
#include <sova/pool.hpp>
#include <sova/sim.hpp>
#include <sova/sova.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace sova;
using sova::test::pattern;
using sova::test::scenario_seeds;
using sova::test::stats_of;
using namespace sova::capi_test;

namespace {

constexpr cudaMemAllocationHandleType kPosix = cudaMemHandleTypePosixFileDescriptor;
constexpr const char* kPeerTest = "scenario ipc peer: command server";

std::uint64_t fnv(const unsigned char* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// ---- descriptors over a Unix socket (SCM_RIGHTS), as a program sends them ----

bool send_msg(int sock, const void* buf, std::size_t len, int fd) {
  msghdr m{};
  iovec iov{const_cast<void*>(buf), len};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
  std::memset(ctl, 0, sizeof ctl);
  if (fd >= 0) {
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  ssize_t n;
  do n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(len);
}

long recv_msg(int sock, void* buf, std::size_t len, int* fd) {
  *fd = -1;
  msghdr m{};
  iovec iov{buf, len};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))];
  m.msg_control = ctl;
  m.msg_controllen = sizeof ctl;
  ssize_t n;
  do n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
  return n;
}

// ---- the peer's protocol ----

enum Op : int {
  kImportPool = 1,  // fd attached; arg: 0 plain, 1 NULL out pointer
  kImportBadFd,     // arg: 0 a closed number, 1 /dev/null, 2 a socket whose other end is closed,
                    //      3 a socket whose other end is open and silent
  kImportPtr,       // pool (-1: NULL pool), data; arg: 1 NULL ptr out, 2 NULL data
  kRead,            // ptr, off, len: reply value = fnv of the bytes
  kWrite,           // ptr, off, len, seed: pattern(len, seed) written and synchronized
  kFree,            // ptr, off (interior free when off != 0); arg 1: keep the id even on success
  kDestroyPool,     // pool
  kCounters,
  kProbe,           // pool, ptr: the imported pool's refusals, codes[]
  kSetAccess,       // pool, arg: cudaMemAccessFlags, device = len
  kExit,
};

struct Cmd {
  int op = 0;
  int pool = -1;
  int ptr = -1;
  int arg = 0;
  std::uint64_t off = 0, len = 0, seed = 0;
  cudaMemPoolPtrExportData data{};
};

struct Counts {
  std::uint64_t mappings = 0, reservations = 0, imported_handles = 0, maps = 0, unmaps = 0, physical_bytes = 0,
                faults = 0;
  bool operator==(const Counts& o) const {
    return mappings == o.mappings && reservations == o.reservations && imported_handles == o.imported_handles &&
           maps == o.maps && unmaps == o.unmaps && physical_bytes == o.physical_bytes && faults == o.faults;
  }
  bool operator!=(const Counts& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{mappings " << c.mappings << ", reservations " << c.reservations << ", imported_handles "
            << c.imported_handles << ", maps " << c.maps << ", unmaps " << c.unmaps << ", physical " << c.physical_bytes
            << ", faults " << c.faults << "}";
}

struct Reply {
  int err = -1;
  int id = -1;
  std::uint64_t addr = 0;
  std::uint64_t value = 0;
  Counts before, after;
  int codes[16] = {};
  char msg[200] = {};
};

Counts counts_of(const SimDriver& d) {
  const SimCounters c = d.counters();
  Counts r;
  r.mappings = c.mappings;
  r.reservations = c.reservations;
  r.imported_handles = c.imported_handles;
  r.maps = c.maps;
  r.unmaps = c.unmaps;
  r.physical_bytes = c.physical_bytes;
  r.faults = d.faults();
  return r;
}

/// The importing process: this binary running the hidden peer test case
/// (conformance/peer_process.hpp), driven by commands.
class Peer {
 public:
  Peer() : process_(kPeerTest) {}
  ~Peer() { process_.kill(); }  // a command server ends only when told (finish) or killed
  Peer(const Peer&) = delete;
  Peer& operator=(const Peer&) = delete;

  /// Sends a command (with a descriptor if fd >= 0) and returns the reply; a
  /// peer silent for timeout_ms is killed and the test fails.
  Reply call(const Cmd& c, int fd = -1, int timeout_ms = 30000) {
    REQUIRE(process_.running());
    const int sock = process_.socket();
    REQUIRE(send_msg(sock, &c, sizeof c, fd));
    pollfd p{sock, POLLIN, 0};
    int ready;
    do ready = ::poll(&p, 1, timeout_ms);
    while (ready < 0 && errno == EINTR);
    if (ready <= 0) {
      process_.kill();
      FAIL("the importing process did not answer command " << c.op << " (arg " << c.arg << ") within "
                                                           << timeout_ms << " ms: it hangs");
    }
    Reply r;
    int none = -1;
    const long n = recv_msg(sock, &r, sizeof r, &none);
    if (n != static_cast<long>(sizeof r)) {
      const int status = process_.wait();  // a signal is shown by wait()
      FAIL("the importing process died during command " << c.op << " (exit status " << status << ")");
    }
    return r;
  }
  /// Tells the peer to exit; its exit status (0: all its own checks passed).
  int finish() {
    Cmd c;
    c.op = kExit;
    (void)call(c);
    return process_.wait();
  }

  // Conveniences.
  int import_pool(int fd) {
    Cmd c;
    c.op = kImportPool;
    const Reply r = call(c, fd);
    INFO("import pool: " << r.msg);
    REQUIRE(r.err == cudaSuccess);
    return r.id;
  }
  Reply import_ptr(int pool, const cudaMemPoolPtrExportData& data) {
    Cmd c;
    c.op = kImportPtr;
    c.pool = pool;
    c.data = data;
    return call(c);
  }
  Reply read(int ptr, std::size_t off, std::size_t len) {
    Cmd c;
    c.op = kRead;
    c.ptr = ptr;
    c.off = off;
    c.len = len;
    return call(c);
  }
  Reply write(int ptr, std::size_t off, std::size_t len, std::uint64_t seed) {
    Cmd c;
    c.op = kWrite;
    c.ptr = ptr;
    c.off = off;
    c.len = len;
    c.seed = seed;
    return call(c);
  }
  Reply free(int ptr, std::size_t off = 0) {
    Cmd c;
    c.op = kFree;
    c.ptr = ptr;
    c.off = off;
    return call(c);
  }
  Reply destroy(int pool) {
    Cmd c;
    c.op = kDestroyPool;
    c.pool = pool;
    return call(c);
  }
  Counts counts() {
    Cmd c;
    c.op = kCounters;
    return call(c).after;
  }

 private:
  sova::test::PeerProcess process_;
};

// ---- the exporting side ----

/// Trims the default pools so that no pool of this process gives memory back
/// in the background while a test compares the sim's counters.
void settle() {
  for (int d = 0; d < 2; ++d) REQUIRE(sovaMemPoolTrimTo(default_pool(d), 0) == cudaSuccess);
}

sovaMemPool_t make_exportable(int device = 0, bool keep_memory = true) {
  sovaMemPoolProps props = props_on(device);
  props.handleTypes = kPosix;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  if (keep_memory) {  // no release in the background: the counters stay still unless the test acts
    std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &max) == cudaSuccess);
  }
  return pool;
}

int share(sovaMemPool_t pool) {
  int fd = -1;
  REQUIRE(sovaMemPoolExportToShareableHandle(&fd, pool, kPosix, 0) == cudaSuccess);
  REQUIRE(fd >= 0);
  return fd;
}

/// `pool` shared with `peer` and imported there, the descriptor then closed on
/// this side (docs/ipc.md: "send it ... and close it"); the peer's id of it.
int import_into(Peer& peer, sovaMemPool_t pool) {
  const int fd = share(pool);
  const int ip = peer.import_pool(fd);
  ::close(fd);
  return ip;
}

void put(cudaStream_t s, void* dev, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  REQUIRE(sim().memcpy_async(dev, host, bytes, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
}

std::vector<unsigned char> get(cudaStream_t s, const void* dev, std::size_t bytes) {
  std::vector<unsigned char> back(bytes, 0);
  if (bytes == 0) return back;
  REQUIRE(sim().memcpy_async(back.data(), dev, bytes, s) == cudaSuccess);
  REQUIRE(sim().stream_synchronize(s) == cudaSuccess);
  return back;
}

struct Snap {
  std::uint64_t reserved, used, live, allocations, deallocations, mapped, unmapped;
  std::size_t physical;
  bool operator==(const Snap& o) const {
    return reserved == o.reserved && used == o.used && live == o.live && allocations == o.allocations &&
           deallocations == o.deallocations && mapped == o.mapped && unmapped == o.unmapped && physical == o.physical;
  }
};
std::ostream& operator<<(std::ostream& os, const Snap& s) {
  return os << "{reserved " << s.reserved << ", used " << s.used << ", live " << s.live << ", allocations "
            << s.allocations << ", deallocations " << s.deallocations << ", chunksMapped " << s.mapped
            << ", chunksUnmapped " << s.unmapped << ", sim physical " << s.physical << "}";
}
Snap snap(sovaMemPool_t pool) {
  const sovaMemPoolStats st = stats_of(pool);
  return Snap{st.reservedCurrent, st.usedCurrent, st.liveBlocks,      st.allocations,
              st.deallocations,   st.chunksMapped, st.chunksUnmapped, sim().counters().physical_bytes};
}

/// One exported block, with what it should hold.
struct Block {
  unsigned char* p = nullptr;
  std::size_t size = 0;
  std::vector<unsigned char> mirror;
  cudaMemPoolPtrExportData data{};
  int peer_id = -1;           // the importer's id of its import, -1 when not imported
  std::uint64_t peer_addr = 0;
};

Block new_block(sovaMemPool_t pool, cudaStream_t s, std::size_t size, std::uint64_t seed) {
  Block b;
  b.size = size;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, size, pool, s) == cudaSuccess);
  b.p = static_cast<unsigned char*>(p);
  b.mirror = pattern(size, seed);
  put(s, b.p, b.mirror.data(), size);
  REQUIRE(sovaMemPoolExportPointer(&b.data, b.p) == cudaSuccess);
  return b;
}

std::size_t random_size(std::mt19937_64& rng) {
  switch (rng() % 3) {
    case 0: return 1 + rng() % (64 << 10);
    case 1: return (64 << 10) + rng() % (3 * MiB);
    default: return 3 * MiB + rng() % (9 * MiB);
  }
}

const char* kDocStale =
    "docs/ipc.md: \"The exporter's free makes the block's export data stale at once: a later import of it is "
    "cudaErrorInvalidValue, even if the pool hands the same offset to a new block\"";
const char* kDocMalformed =
    "docs/ipc.md: \"Malformed data (bad magic, version or checksum), another pool's data, stale data, a closed "
    "descriptor, a descriptor that is not a sova pool handle (not a socket, or nobody answers), and an import into "
    "the exporting process itself (the exporter reports its process id) all give cudaErrorInvalidValue and change "
    "nothing\"";

/// An import that must be refused with cudaErrorInvalidValue and change nothing in the importer.
void check_refused(const Reply& r, const char* doc) {
  INFO(doc);
  INFO("peer: " << r.msg);
  CHECK(r.err == cudaErrorInvalidValue);
  CHECK(r.before == r.after);
}

}  // namespace

// ---------------------------------------------------------------------------
// The importing process
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc peer: command server", "[.peer]") {
  const int control = sova::test::peer_socket();
  REQUIRE(control >= 0);
  SimConfig config;
  config.device_count = 2;
  config.abort_on_fault = false;  // a read of unmapped memory is counted, not fatal
  auto* driver = new SimDriver(config);  // leaked: imported pools may outlive this scope
  REQUIRE(set_process_driver(driver) == cudaSuccess);
  SimDriver& d = *driver;
  const cudaStream_t s = d.create_stream();
  std::vector<sovaMemPool_t> pools;
  std::vector<void*> ptrs;
  auto pool_at = [&](int i) -> sovaMemPool_t { return i >= 0 && i < static_cast<int>(pools.size()) ? pools[i] : nullptr; };
  auto ptr_at = [&](int i) -> unsigned char* {
    return i >= 0 && i < static_cast<int>(ptrs.size()) ? static_cast<unsigned char*>(ptrs[i]) : nullptr;
  };
  for (;;) {
    Cmd c;
    int fd = -1;
    const long n = recv_msg(control, &c, sizeof c, &fd);
    if (n != static_cast<long>(sizeof c)) break;
    Reply r;
    r.before = counts_of(d);
    switch (c.op) {
      case kImportPool: {
        sovaMemPool_t p = nullptr;
        r.err = sovaMemPoolImportFromShareableHandle(c.arg == 1 ? nullptr : &p,
                                                     reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kPosix, 0);
        if (r.err == cudaSuccess && c.arg != 1) {
          r.id = static_cast<int>(pools.size());
          pools.push_back(p);
        }
        r.addr = reinterpret_cast<std::uintptr_t>(p);
        break;
      }
      case kImportBadFd: {
        int bad = -1, other = -1;
        if (c.arg == 0) {
          bad = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
          ::close(bad);  // a number no descriptor has now
        } else if (c.arg == 1) {
          bad = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        } else {
          int sp[2];
          REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
          bad = sp[0];
          other = sp[1];
          if (c.arg == 2) {
            ::close(other);
            other = -1;
          }
        }
        sovaMemPool_t p = nullptr;
        r.err = sovaMemPoolImportFromShareableHandle(&p, reinterpret_cast<void*>(static_cast<intptr_t>(bad)), kPosix, 0);
        r.addr = reinterpret_cast<std::uintptr_t>(p);
        if (r.err == cudaSuccess) sovaMemPoolDestroy(p);
        if (c.arg != 0) ::close(bad);
        if (other >= 0) ::close(other);
        break;
      }
      case kImportPtr: {
        void* p = nullptr;
        sovaMemPool_t pool = pool_at(c.pool);
        r.err = sovaMemPoolImportPointer(c.arg == 1 ? nullptr : &p, pool, c.arg == 2 ? nullptr : &c.data);
        if (r.err == cudaSuccess && c.arg == 0) {
          r.id = static_cast<int>(ptrs.size());
          ptrs.push_back(p);
          r.addr = reinterpret_cast<std::uintptr_t>(p);
        }
        break;
      }
      case kRead: {
        unsigned char* p = ptr_at(c.ptr);
        std::vector<unsigned char> back(c.len, 0);
        r.err = p == nullptr ? cudaErrorInvalidValue : d.memcpy_async(back.data(), p + c.off, c.len, s);
        if (r.err == cudaSuccess) r.err = d.stream_synchronize(s);
        r.value = fnv(back.data(), back.size());
        break;
      }
      case kWrite: {
        unsigned char* p = ptr_at(c.ptr);
        const std::vector<unsigned char> bytes = pattern(c.len, c.seed);
        r.err = p == nullptr ? cudaErrorInvalidValue : d.memcpy_async(p + c.off, bytes.data(), c.len, s);
        if (r.err == cudaSuccess) r.err = d.stream_synchronize(s);
        break;
      }
      case kFree: {
        unsigned char* p = ptr_at(c.ptr);
        r.err = sovaFreeAsync(p == nullptr ? nullptr : p + c.off, s);
        break;
      }
      case kDestroyPool:
        r.err = sovaMemPoolDestroy(pool_at(c.pool));
        break;
      case kCounters:
        r.err = cudaSuccess;
        break;
      case kProbe: {
        sovaMemPool_t pool = pool_at(c.pool);
        unsigned char* p = ptr_at(c.ptr);
        void* q = reinterpret_cast<void*>(0x1);
        r.codes[0] = sovaMallocFromPoolAsync(&q, 512, pool, s);
        r.codes[15] = q == nullptr ? 0 : 1;  // "Any failure sets *devPtr = NULL"
        std::uint64_t v = 0;
        r.codes[1] = sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v);
        r.codes[2] = sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v);
        r.codes[3] = sovaDeviceSetMemPool(0, pool);
        r.codes[4] = sovaMemPoolSleep(pool, sovaSleepDiscard, s);
        r.codes[5] = sovaMemPoolWake(pool, s);
        int efd = -1;
        r.codes[6] = sovaMemPoolExportToShareableHandle(&efd, pool, kPosix, 0);
        if (efd >= 0) ::close(efd);
        cudaMemPoolPtrExportData again{};
        r.codes[7] = sovaMemPoolExportPointer(&again, p);
        cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
        cudaMemLocation where{};
        where.type = cudaMemLocationTypeDevice;
        where.id = 0;
        r.codes[8] = sovaMemPoolGetAccess(&flags, pool, &where);
        r.codes[9] = static_cast<int>(flags);
        cudaMemAccessDesc other{};
        other.location.type = cudaMemLocationTypeDevice;
        other.location.id = 1;
        other.flags = cudaMemAccessFlagsProtReadWrite;
        r.codes[10] = sovaMemPoolSetAccess(pool, &other, 1);
        void* out = nullptr;
        r.codes[11] = sovaMemPoolImportPointer(nullptr, pool, &c.data);
        r.codes[12] = sovaMemPoolImportPointer(&out, nullptr, &c.data);
        r.codes[13] = sovaMemPoolImportPointer(&out, pool, nullptr);
        int asleep = 0;
        r.codes[14] = sovaMemPoolIsAsleep(pool, &asleep);
        r.err = cudaSuccess;
        break;
      }
      case kSetAccess: {
        cudaMemAccessDesc a{};
        a.location.type = cudaMemLocationTypeDevice;
        a.location.id = static_cast<int>(c.len);
        a.flags = static_cast<cudaMemAccessFlags>(c.arg);
        r.err = sovaMemPoolSetAccess(pool_at(c.pool), &a, 1);
        break;
      }
      case kExit:
        r.err = cudaSuccess;
        break;
      default:
        r.err = cudaErrorUnknown;
    }
    if (r.err != cudaSuccess) std::snprintf(r.msg, sizeof r.msg, "%s", sovaGetLastErrorMessage());
    if (fd >= 0) ::close(fd);
    r.after = counts_of(d);
    REQUIRE(send_msg(control, &r, sizeof r, -1));
    if (c.op == kExit) break;
  }
}

// ---------------------------------------------------------------------------
// Export, import, write and read both ways; importer frees in random order
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: random blocks exported, imported, written and read both ways, freed in the documented order",
          "[ipc][capi][scenario]") {
  for (const std::uint64_t seed : scenario_seeds({101, 202, 303})) {
    INFO("seed " << seed << " (SOVA_SCENARIO_SEED=" << seed << " replays it)");
    std::mt19937_64 rng(seed);
    sim();
    settle();
    ScopedStream s;
    sovaMemPool_t pool = make_exportable();
    Peer peer;
    const Counts start = peer.counts();
    const int ip = import_into(peer, pool);  // "send it ... and close it"
    const Counts with_pool = peer.counts();
    CHECK(with_pool.mappings == start.mappings);  // "The importer maps nothing that no live import uses"
    std::vector<Block> blocks;
    const unsigned char* first_p = nullptr;  // one block still imported, for the base + offset check
    std::uint64_t first_addr = 0;
    for (int step = 0; step < 40; ++step) {
      INFO("step " << step);
      const unsigned action = rng() % 10;
      if (blocks.size() < 3 || action < 4) {
        Block b = new_block(pool, s, random_size(rng), rng());
        cudaMemPoolPtrExportData again{};
        REQUIRE(sovaMemPoolExportPointer(&again, b.p) == cudaSuccess);
        {
          INFO("docs/ipc.md: \"Exporting a live block twice gives the same data\"");
          CHECK(std::memcmp(&again, &b.data, sizeof again) == 0);
        }
        const Reply r = peer.import_ptr(ip, b.data);
        INFO("peer: " << r.msg);
        REQUIRE(r.err == cudaSuccess);
        b.peer_id = r.id;
        b.peer_addr = r.addr;
        if (first_p == nullptr) {
          first_p = b.p;
          first_addr = b.peer_addr;
        } else {
          INFO("docs/ipc.md: \"The importer maps each one at the same offset in a reservation of its own the size "
               "of the pool's, so the block is at base + offset\"");
          CHECK(static_cast<std::int64_t>(b.peer_addr - first_addr) ==
                static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(b.p) -
                                          reinterpret_cast<std::uintptr_t>(first_p)));
        }
        const Reply rd = peer.read(b.peer_id, 0, b.size);
        REQUIRE(rd.err == cudaSuccess);
        CHECK(rd.after.faults == rd.before.faults);
        CHECK(rd.value == fnv(b.mirror.data(), b.size));  // what the exporter wrote, read in the importer
        blocks.push_back(std::move(b));
      } else if (action < 6) {  // the importer writes, the exporter reads
        Block& b = blocks[rng() % blocks.size()];
        const std::size_t off = rng() % b.size;
        const std::size_t len = 1 + rng() % (b.size - off);
        const std::uint64_t wseed = rng();
        const Reply w = peer.write(b.peer_id, off, len, wseed);
        REQUIRE(w.err == cudaSuccess);
        CHECK(w.after.faults == w.before.faults);
        const std::vector<unsigned char> bytes = pattern(len, wseed);
        std::memcpy(b.mirror.data() + off, bytes.data(), len);
        CHECK(get(s, b.p, b.size) == b.mirror);
      } else if (action < 8) {  // the exporter writes, the importer reads a random range
        Block& b = blocks[rng() % blocks.size()];
        const std::size_t off = rng() % b.size;
        const std::size_t len = 1 + rng() % (b.size - off);
        const std::vector<unsigned char> bytes = pattern(len, rng());
        put(s, b.p + off, bytes.data(), len);
        std::memcpy(b.mirror.data() + off, bytes.data(), len);
        const std::size_t roff = rng() % b.size;
        const std::size_t rlen = 1 + rng() % (b.size - roff);
        const Reply rd = peer.read(b.peer_id, roff, rlen);
        REQUIRE(rd.err == cudaSuccess);
        CHECK(rd.value == fnv(b.mirror.data() + roff, rlen));
      } else {  // retire a block: the importer frees first, then the exporter
        const std::size_t i = rng() % blocks.size();
        Block b = std::move(blocks[i]);
        blocks.erase(blocks.begin() + static_cast<std::ptrdiff_t>(i));
        if (b.p == first_p) first_p = nullptr;
        REQUIRE(peer.free(b.peer_id).err == cudaSuccess);
        CHECK(peer.free(b.peer_id).err == cudaErrorInvalidValue);  // docs/c-api.md: a double free
        if (rng() % 2 == 0) {  // "re-import after free" while the block lives: allowed, same memory
          const Reply again = peer.import_ptr(ip, b.data);
          INFO("peer: " << again.msg);
          REQUIRE(again.err == cudaSuccess);
          CHECK(again.addr == b.peer_addr);
          const Reply rd = peer.read(again.id, 0, b.size);
          CHECK(rd.value == fnv(b.mirror.data(), b.size));
          REQUIRE(peer.free(again.id).err == cudaSuccess);
        }
        REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
        cudaMemPoolPtrExportData after{};
        CHECK(sovaMemPoolExportPointer(&after, b.p) == cudaErrorInvalidValue);  // not a live block any more
        check_refused(peer.import_ptr(ip, b.data), kDocStale);
        if (first_p == nullptr && !blocks.empty()) {
          first_p = blocks.front().p;
          first_addr = blocks.front().peer_addr;
        }
      }
    }
    // The rest: the importer frees in random order, then the exporter.
    std::shuffle(blocks.begin(), blocks.end(), rng);
    for (Block& b : blocks) REQUIRE(peer.free(b.peer_id).err == cudaSuccess);
    const Counts freed = peer.counts();
    {
      INFO("docs/ipc.md: \"the last free unmaps\"");
      CHECK(freed.mappings == with_pool.mappings);
      CHECK(freed.imported_handles == 0);
      CHECK(freed.faults == 0);
      CHECK(freed.physical_bytes == 0);  // sim.hpp: "imported chunks count against no device"
    }
    for (Block& b : blocks) REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
    for (Block& b : blocks) check_refused(peer.import_ptr(ip, b.data), kDocStale);
    const Reply destroyed = peer.destroy(ip);
    CHECK(destroyed.err == cudaSuccess);
    CHECK(destroyed.after.reservations == start.reservations);
    CHECK(destroyed.after.mappings == start.mappings);
    s.synchronize();
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    CHECK(stats_of(pool).reservedCurrent == 0);
    CHECK(stats_of(pool).liveBlocks == 0);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(peer.finish() == 0);
  }
}

// ---------------------------------------------------------------------------
// The importer frees and closes in odd orders
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: small blocks sharing chunks freed by the importer in random order, the rest closed by "
          "destroying the imported pool",
          "[ipc][capi][scenario]") {
  for (const std::uint64_t seed : scenario_seeds({7, 77})) {
    INFO("seed " << seed << " (SOVA_SCENARIO_SEED=" << seed << " replays it)");
    std::mt19937_64 rng(seed);
    sim();
    settle();
    ScopedStream s;
    sovaMemPool_t pool = make_exportable();
    Peer peer;
    const Counts start = peer.counts();
    const int ip = import_into(peer, pool);
    const Counts with_pool = peer.counts();
    std::vector<Block> blocks;
    for (int i = 0; i < 30; ++i) {
      Block b = new_block(pool, s, 256 + rng() % (700 << 10), rng());
      const Reply r = peer.import_ptr(ip, b.data);
      INFO("peer: " << r.msg);
      REQUIRE(r.err == cudaSuccess);
      b.peer_id = r.id;
      b.peer_addr = r.addr;
      blocks.push_back(std::move(b));
    }
    std::vector<std::size_t> order(blocks.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    const std::size_t half = order.size() / 2;
    for (std::size_t k = 0; k < half; ++k) {
      Block& gone = blocks[order[k]];
      INFO("importer frees block " << order[k] << " (" << gone.size << " bytes), " << k + 1 << " freed");
      REQUIRE(peer.free(gone.peer_id).err == cudaSuccess);
      gone.peer_id = -1;
      // "Its mappings are reference-counted per chunk (several small blocks share a chunk); the last free unmaps":
      // every block still imported reads as before, without a fault.
      for (std::size_t j = k + 1; j < order.size(); ++j) {
        Block& b = blocks[order[j]];
        const Reply rd = peer.read(b.peer_id, 0, b.size);
        INFO("docs/ipc.md: \"the last free unmaps\" (not an earlier one); block " << order[j]);
        CHECK(rd.after.faults == rd.before.faults);
        CHECK(rd.value == fnv(b.mirror.data(), b.size));
      }
    }
    // Close the rest: the imported pool destroyed with imports live.
    const Reply destroyed = peer.destroy(ip);
    {
      INFO("docs/c-api.md: imported pools: \"sovaMemPoolDestroy unmaps everything\"");
      CHECK(destroyed.err == cudaSuccess);
      CHECK(destroyed.after.mappings == start.mappings);
      CHECK(destroyed.after.reservations == start.reservations);
      CHECK(destroyed.after.imported_handles == 0);
    }
    CHECK(peer.destroy(ip).err == cudaErrorInvalidValue);  // "The handle fails everywhere from then on"
    // A pointer of the destroyed imported pool, freed late: whatever the code, nothing changes there.
    const Reply late = peer.free(blocks[order[half]].peer_id);
    CHECK(late.before == late.after);
    CHECK(late.err != cudaSuccess);  // the pointer lies in no pool any more (its VA was freed)
    // The exporter frees half; a second importer connection sees the rest live, the freed half stale.
    for (std::size_t k = 0; k < half; ++k) REQUIRE(sovaFreeAsync(blocks[order[k]].p, s) == cudaSuccess);
    const int ip2 = import_into(peer, pool);
    for (std::size_t k = 0; k < order.size(); ++k) {
      Block& b = blocks[order[k]];
      const Reply r = peer.import_ptr(ip2, b.data);
      if (k < half) {
        check_refused(r, kDocStale);
      } else {
        INFO("peer: " << r.msg);
        REQUIRE(r.err == cudaSuccess);
        const Reply rd = peer.read(r.id, 0, b.size);
        CHECK(rd.value == fnv(b.mirror.data(), b.size));
        REQUIRE(peer.free(r.id).err == cudaSuccess);
      }
    }
    CHECK(peer.counts().mappings == with_pool.mappings + 0);  // the second pool maps nothing now
    for (std::size_t k = half; k < order.size(); ++k) REQUIRE(sovaFreeAsync(blocks[order[k]].p, s) == cudaSuccess);
    CHECK(peer.destroy(ip2).err == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(peer.finish() == 0);
  }
}

// ---------------------------------------------------------------------------
// The same pointer imported twice; two imported pools; two importers
// ---------------------------------------------------------------------------

// The docs do not say what importing the same data twice into one imported pool gives (ambiguous, see the
// report). Seen: the same address, and one import: the first free unmaps, the second free is a double free
// (cudaErrorInvalidValue). Asserted here only that the two answers agree.
TEST_CASE("scenario ipc: the same block imported twice into one imported pool", "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Block a = new_block(pool, s, 3 * MiB, 1);
  Peer peer;
  const int ip = import_into(peer, pool);
  const Counts base = peer.counts();
  const Reply one = peer.import_ptr(ip, a.data);
  const Reply two = peer.import_ptr(ip, a.data);
  REQUIRE(one.err == cudaSuccess);
  // docs/ipc.md: "Exporting a live block twice gives the same data, so every importer's copy stays valid";
  // the same data imported again is valid data.
  INFO("peer: " << two.msg);
  REQUIRE(two.err == cudaSuccess);
  CHECK(two.addr == one.addr);  // "the block is at base + offset"
  REQUIRE(peer.free(one.id).err == cudaSuccess);
  // Either the second import is a reference of its own (the memory stays mapped, the second free succeeds),
  // or it is the same import (the second free is a double free). Never: a second free that succeeds on memory
  // the first free already unmapped.
  const Reply between = peer.read(two.id, 0, a.size);
  const bool still_mapped = between.after.faults == between.before.faults;
  const Reply second = peer.free(two.id);
  INFO("after one free of two imports: " << (still_mapped ? "still mapped" : "unmapped (a read faulted)")
                                         << "; the second free returned " << second.err << " " << second.msg);
  if (second.err == cudaSuccess) {
    CHECK(still_mapped);
    CHECK(between.value == fnv(a.mirror.data(), a.size));
  } else {
    CHECK(second.err == cudaErrorInvalidValue);
    CHECK(!still_mapped);
  }
  CHECK(peer.counts().mappings == base.mappings);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(peer.finish() == 0);
}

TEST_CASE("scenario ipc: one block through two imported pools and two importing processes", "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Block a = new_block(pool, s, 5 * MiB + 123, 2);
  Peer p1, p2;
  const int fd1 = share(pool), fd2 = share(pool), fd3 = share(pool);
  CHECK(fd1 != fd2);  // "a new POSIX descriptor per call (one per importer)"
  CHECK(fd2 != fd3);
  const int i1a = p1.import_pool(fd1);
  const int i1b = p1.import_pool(fd2);  // a second connection in the same importer
  const int i2 = p2.import_pool(fd3);
  ::close(fd1);
  ::close(fd2);
  ::close(fd3);
  const Reply r1a = p1.import_ptr(i1a, a.data);
  const Reply r1b = p1.import_ptr(i1b, a.data);
  const Reply r2 = p2.import_ptr(i2, a.data);
  REQUIRE(r1a.err == cudaSuccess);
  REQUIRE(r1b.err == cudaSuccess);
  REQUIRE(r2.err == cudaSuccess);
  CHECK(r1a.addr != r1b.addr);  // each imported pool has "a reservation of its own the size of the pool's"
  // A write through one is read through the others (after its synchronize: the ordering rule).
  const std::size_t off = 4097, len = 3 * MiB;
  REQUIRE(p1.write(r1a.id, off, len, 99).err == cudaSuccess);
  const std::vector<unsigned char> w = pattern(len, 99);
  std::memcpy(a.mirror.data() + off, w.data(), len);
  CHECK(p1.read(r1b.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
  CHECK(p2.read(r2.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
  CHECK(get(s, a.p, a.size) == a.mirror);
  REQUIRE(p2.write(r2.id, 0, 100, 5).err == cudaSuccess);
  const std::vector<unsigned char> w2 = pattern(100, 5);
  std::memcpy(a.mirror.data(), w2.data(), 100);
  CHECK(p1.read(r1a.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
  // Freeing in one imported pool leaves the other's mapping alone.
  REQUIRE(p1.free(r1a.id).err == cudaSuccess);
  const Reply still = p1.read(r1b.id, 0, a.size);
  CHECK(still.after.faults == still.before.faults);
  CHECK(still.value == fnv(a.mirror.data(), a.size));
  REQUIRE(p1.free(r1b.id).err == cudaSuccess);
  REQUIRE(p2.free(r2.id).err == cudaSuccess);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  CHECK(p1.destroy(i1a).err == cudaSuccess);
  CHECK(p1.destroy(i1b).err == cudaSuccess);
  CHECK(p2.destroy(i2).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(p1.finish() == 0);
  CHECK(p2.finish() == 0);
}

// ---------------------------------------------------------------------------
// Stale data; the ordering rule broken; the exporter gone
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: export data goes stale at the exporter's free, even when the offset is handed out again",
          "[ipc][capi][scenario]") {
  for (const std::uint64_t seed : scenario_seeds({5, 55, 555})) {
    INFO("seed " << seed << " (SOVA_SCENARIO_SEED=" << seed << " replays it)");
    std::mt19937_64 rng(seed);
    sim();
    settle();
    ScopedStream s;
    sovaMemPool_t pool = make_exportable();
    Peer peer;
    const int ip = import_into(peer, pool);
    const std::size_t size = random_size(rng);
    Block a = new_block(pool, s, size, rng());
    const Reply ra = peer.import_ptr(ip, a.data);
    REQUIRE(ra.err == cudaSuccess);
    REQUIRE(peer.free(ra.id).err == cudaSuccess);  // importer first
    REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
    s.synchronize();
    Block b = new_block(pool, s, size, rng());  // the same stream, the same size: the same place
    INFO("a at " << static_cast<void*>(a.p) << ", b at " << static_cast<void*>(b.p));
    REQUIRE(b.p == a.p);  // the scenario needs the offset handed out again
    CHECK(std::memcmp(&a.data, &b.data, sizeof a.data) != 0);  // "a random token of its own"
    check_refused(peer.import_ptr(ip, a.data), kDocStale);
    const Reply rb = peer.import_ptr(ip, b.data);
    INFO("peer: " << rb.msg);
    REQUIRE(rb.err == cudaSuccess);
    CHECK(rb.addr == ra.addr);
    CHECK(peer.read(rb.id, 0, size).value == fnv(b.mirror.data(), size));
    check_refused(peer.import_ptr(ip, a.data), kDocStale);  // still stale with b imported
    REQUIRE(peer.free(rb.id).err == cudaSuccess);
    REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
    CHECK(peer.destroy(ip).err == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(peer.finish() == 0);
  }
}

TEST_CASE("scenario ipc: the exporter frees and releases a block the importer still holds; an import naming a new "
          "chunk at that place is refused",
          "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Peer peer;
  const int ip = import_into(peer, pool);
  const std::size_t size = 8 * MiB;
  Block a = new_block(pool, s, size, 31);
  const Reply ra = peer.import_ptr(ip, a.data);
  REQUIRE(ra.err == cudaSuccess);
  // The program breaks the ordering rule: the exporter frees first, and trims: the chunks go.
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  s.synchronize();
  const std::size_t physical_before = sim().counters().physical_bytes;
  REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
  REQUIRE(stats_of(pool).reservedCurrent == 0);
  CHECK(sim().counters().physical_bytes + size <= physical_before);  // released here (the importer maps it still)
  Block b = new_block(pool, s, size, 32);  // new chunks, created at the same place
  REQUIRE(b.p == a.p);
  const Reply rb = peer.import_ptr(ip, b.data);
  {
    INFO("docs/ipc.md: \"if an import's answer names a chunk where the importer still maps another one in use, the "
         "program broke the ordering rule and the import fails with cudaErrorInvalidValue\"");
    check_refused(rb, "(the importer still maps the released chunk for its import of a)");
  }
  // The importer frees late; then b imports and shows b's memory.
  REQUIRE(peer.free(ra.id).err == cudaSuccess);
  const Reply rb2 = peer.import_ptr(ip, b.data);
  INFO("peer: " << rb2.msg);
  REQUIRE(rb2.err == cudaSuccess);
  CHECK(peer.read(rb2.id, 0, size).value == fnv(b.mirror.data(), size));
  REQUIRE(peer.free(rb2.id).err == cudaSuccess);
  REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(peer.finish() == 0);
}

TEST_CASE("scenario ipc: the exporting pool destroyed: what was imported stays valid, later imports are refused",
          "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  const std::size_t physical0 = sim().counters().physical_bytes;
  sovaMemPool_t pool = make_exportable();
  Peer peer;
  const int fd = share(pool);
  const int late_fd = share(pool);  // sent now, imported after the destroy
  const int ip = peer.import_pool(fd);
  ::close(fd);
  Block a = new_block(pool, s, 6 * MiB, 41);
  Block dead = new_block(pool, s, 4096, 42);
  const Reply ra = peer.import_ptr(ip, a.data);
  REQUIRE(ra.err == cudaSuccess);
  REQUIRE(sovaFreeAsync(dead.p, s) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);  // a still live: "Blocks still live stay valid"
  // ipc.hpp, ~PoolExporter: "what they imported stays mapped and valid there until they free it".
  const Reply rd = peer.read(ra.id, 0, a.size);
  CHECK(rd.after.faults == rd.before.faults);
  CHECK(rd.value == fnv(a.mirror.data(), a.size));
  // The live block is still the same memory on both sides.
  const std::vector<unsigned char> w = pattern(MiB, 43);
  put(s, a.p + MiB, w.data(), MiB);
  std::memcpy(a.mirror.data() + MiB, w.data(), MiB);
  CHECK(peer.read(ra.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
  check_refused(peer.import_ptr(ip, dead.data), kDocStale);
  REQUIRE(peer.free(ra.id).err == cudaSuccess);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);  // docs/c-api.md: "A block of a destroyed pool: cudaSuccess"
  s.synchronize();
  CHECK(sim().counters().physical_bytes <= physical0);  // "the last one releases the pool"
  check_refused(peer.import_ptr(ip, a.data), "sova.h: \"Malformed, stale or another pool's data, an exporter gone: "
                                             "cudaErrorInvalidValue, nothing changed\"");
  {
    Cmd c;
    c.op = kImportPool;
    const Reply r = peer.call(c, late_fd);
    INFO("sova.h: sovaMemPoolImportFromShareableHandle: \"A closed descriptor, one that is not a sova pool handle, "
         "an exporter gone, or the exporting process itself: cudaErrorInvalidValue\"");
    check_refused(r, kDocMalformed);
  }
  ::close(late_fd);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  CHECK(peer.finish() == 0);
}

// ---------------------------------------------------------------------------
// Bad input at the importer: another pool's data, corrupted data, bad descriptors, NULLs
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: another pool's data, corrupted and garbage export data are refused and change nothing",
          "[ipc][capi][scenario]") {
  for (const std::uint64_t seed : scenario_seeds({9, 99})) {
    INFO("seed " << seed << " (SOVA_SCENARIO_SEED=" << seed << " replays it)");
    std::mt19937_64 rng(seed);
    sim();
    settle();
    ScopedStream s;
    sovaMemPool_t p1 = make_exportable();
    sovaMemPool_t p2 = make_exportable(1);  // the second device
    Block a = new_block(p1, s, 1 + rng() % (4 * MiB), rng());
    Block b = new_block(p2, s, 1 + rng() % (4 * MiB), rng());
    Peer peer;
    const int fd1 = share(p1), fd2 = share(p2);
    const int i1 = peer.import_pool(fd1);
    const int i2 = peer.import_pool(fd2);
    ::close(fd1);
    ::close(fd2);
    // Something imported already, so that a refusal that unmapped it would show.
    const Reply held = peer.import_ptr(i1, a.data);
    REQUIRE(held.err == cudaSuccess);
    const Snap exporter1 = snap(p1);
    check_refused(peer.import_ptr(i2, a.data), kDocMalformed);  // another pool's data
    check_refused(peer.import_ptr(i1, b.data), kDocMalformed);
    // Every single byte changed (a random non-zero xor): refused, or (bytes the data does not use) the very same
    // block: nothing newly mapped, the same address. That everything is refused is asserted on its own below.
    std::vector<int> accepted;
    for (std::size_t i = 0; i < sizeof(cudaMemPoolPtrExportData); ++i) {
      cudaMemPoolPtrExportData bad = a.data;
      reinterpret_cast<unsigned char*>(&bad)[i] ^= static_cast<unsigned char>(1 + rng() % 255);
      const Reply r = peer.import_ptr(i1, bad);
      INFO("byte " << i << " of the export data changed; peer: " << r.msg);
      CHECK(r.before == r.after);
      if (r.err == cudaSuccess) {
        accepted.push_back(static_cast<int>(i));
        CHECK(r.addr == held.addr);  // at worst the block the data names
      } else {
        CHECK(r.err == cudaErrorInvalidValue);
      }
    }
    if (!accepted.empty()) {
      std::ostringstream os;
      for (int i : accepted) os << i << ' ';
      WARN("single-byte changes accepted at bytes " << os.str());
    }
    cudaMemPoolPtrExportData zero{}, ones{}, noise{};
    std::memset(&ones, 0xff, sizeof ones);
    const std::vector<unsigned char> junk = pattern(sizeof noise, rng());
    std::memcpy(&noise, junk.data(), sizeof noise);
    check_refused(peer.import_ptr(i1, zero), kDocMalformed);
    check_refused(peer.import_ptr(i1, ones), kDocMalformed);
    check_refused(peer.import_ptr(i1, noise), kDocMalformed);
    // Two valid halves spliced: a's head, b's tail.
    cudaMemPoolPtrExportData spliced = a.data;
    std::memcpy(reinterpret_cast<unsigned char*>(&spliced) + 32, reinterpret_cast<unsigned char*>(&b.data) + 32, 32);
    check_refused(peer.import_ptr(i1, spliced), kDocMalformed);
    CHECK(snap(p1) == exporter1);  // the exporter changed nothing either
    // The connections still work: the held import reads right, a fresh import of b succeeds.
    CHECK(peer.read(held.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
    const Reply rb = peer.import_ptr(i2, b.data);
    INFO("peer: " << rb.msg);
    REQUIRE(rb.err == cudaSuccess);
    CHECK(peer.read(rb.id, 0, b.size).value == fnv(b.mirror.data(), b.size));
    REQUIRE(peer.free(rb.id).err == cudaSuccess);
    REQUIRE(peer.free(held.id).err == cudaSuccess);
    REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
    REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
    CHECK(peer.destroy(i1).err == cudaSuccess);
    CHECK(peer.destroy(i2).err == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(p1) == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(p2) == cudaSuccess);
    CHECK(peer.finish() == 0);
  }
}

TEST_CASE("scenario ipc: descriptors that are no sova pool handle are refused and change nothing",
          "[ipc][capi][scenario]") {
  sim();
  Peer peer;
  for (int kind : {0, 1, 2}) {
    static const char* const names[] = {"a closed descriptor", "/dev/null (not a socket)",
                                        "a socket whose other end is closed (nobody answers)"};
    INFO(names[kind]);
    Cmd c;
    c.op = kImportBadFd;
    c.arg = kind;
    const Reply r = peer.call(c, -1, 60000);
    check_refused(r, kDocMalformed);
    CHECK(r.addr == 0);  // no pool handed out
  }
  // The exporting process itself.
  settle();
  sovaMemPool_t pool = make_exportable();
  const int fd = share(pool);
  const Snap before = snap(pool);
  const std::size_t reservations = sim().counters().reservations;
  sovaMemPool_t self = nullptr;
  {
    INFO(kDocMalformed);
    CHECK(sovaMemPoolImportFromShareableHandle(&self, reinterpret_cast<void*>(static_cast<intptr_t>(fd)), kPosix, 0) ==
          cudaErrorInvalidValue);
    CHECK(self == nullptr);
    CHECK(sim().counters().reservations == reservations);
  }
  CHECK(snap(pool) == before);
  // The descriptor still works for another process after the refusal.
  const int ip = peer.import_pool(fd);
  ::close(fd);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(peer.finish() == 0);
}

TEST_CASE("scenario ipc: the imported pool refuses what it does not serve, and NULL arguments", "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Block a = new_block(pool, s, MiB, 61);
  Peer peer;
  const int fd = share(pool);
  {  // NULL out-pointer: nothing imported, and the descriptor still usable afterwards
    Cmd c;
    c.op = kImportPool;
    c.arg = 1;
    const Reply r = peer.call(c, fd);
    INFO("sova.h / docs/c-api.md: NULL arguments are cudaErrorInvalidValue throughout the C API");
    check_refused(r, "(sovaMemPoolImportFromShareableHandle(NULL, fd, ...))");
  }
  const int ip = peer.import_pool(fd);
  ::close(fd);
  const Reply ra = peer.import_ptr(ip, a.data);
  REQUIRE(ra.err == cudaSuccess);
  Cmd probe;
  probe.op = kProbe;
  probe.pool = ip;
  probe.ptr = ra.id;
  probe.data = a.data;
  const Reply r = peer.call(probe);
  CHECK(r.before == r.after);
  {
    INFO("docs/c-api.md: \"allocating from an imported pool, its attributes and sovaDeviceSetMemPool are "
         "cudaErrorInvalidValue\"");
    CHECK(r.codes[0] == cudaErrorInvalidValue);
    CHECK(r.codes[15] == 0);  // "Any failure sets *devPtr = NULL"
    CHECK(r.codes[1] == cudaErrorInvalidValue);
    CHECK(r.codes[2] == cudaErrorInvalidValue);
    CHECK(r.codes[3] == cudaErrorInvalidValue);
  }
  {
    INFO("docs/c-api.md: sovaMemPoolSleep / Wake: \"A NULL, destroyed or imported pool or an unknown mode: "
         "cudaErrorInvalidValue ... nothing changed\"");
    CHECK(r.codes[4] == cudaErrorInvalidValue);
    CHECK(r.codes[5] == cudaErrorInvalidValue);
    CHECK(r.codes[14] == cudaErrorInvalidValue);  // sovaMemPoolIsAsleep, one of "the other sleep calls"
  }
  {
    INFO("sova.h: sovaMemPoolExportToShareableHandle: \"The pool must have been created with handleTypes "
         "cudaMemHandleTypePosixFileDescriptor\"; the imported pool serves only the calls listed");
    CHECK(r.codes[6] == cudaErrorInvalidValue);
  }
  {
    INFO("sova.h: sovaMemPoolExportPointer: \"export data for the live block starting at ptr, of a pool created with "
         "a shareable handle type. Anything else: cudaErrorInvalidValue\" (an imported pointer)");
    CHECK(r.codes[7] == cudaErrorInvalidValue);
  }
  CHECK(r.codes[8] == cudaSuccess);  // GetAccess served
  CHECK(r.codes[9] == cudaMemAccessFlagsProtReadWrite);
  {
    INFO("docs/c-api.md: \"sovaMemPoolSetAccess takes read-only or read-write for the importer's device (another "
         "device: cudaErrorInvalidDevice)\"");
    CHECK(r.codes[10] == cudaErrorInvalidDevice);
  }
  {
    INFO("NULL arguments to sovaMemPoolImportPointer: cudaErrorInvalidValue, nothing changed");
    CHECK(r.codes[11] == cudaErrorInvalidValue);
    CHECK(r.codes[12] == cudaErrorInvalidValue);
    CHECK(r.codes[13] == cudaErrorInvalidValue);
  }
  // Read-only: a write faults (on the simulation) and changes nothing; read-write again: it lands.
  Cmd ro;
  ro.op = kSetAccess;
  ro.pool = ip;
  ro.arg = cudaMemAccessFlagsProtRead;
  ro.len = 0;
  REQUIRE(peer.call(ro).err == cudaSuccess);
  const Reply w = peer.write(ra.id, 0, 4096, 3);
  CHECK(w.after.faults == w.before.faults + 1);  // docs/ipc.md Tests: "read-only access (a write faults, on the simulation)"
  CHECK(get(s, a.p, a.size) == a.mirror);
  CHECK(peer.read(ra.id, 0, a.size).value == fnv(a.mirror.data(), a.size));
  Cmd none = ro;
  none.arg = cudaMemAccessFlagsProtNone;
  {
    const Reply rn = peer.call(none);
    INFO("ipc.hpp set_access: \"cudaMemAccessFlagsProtRead or ...ProtReadWrite (else cudaErrorInvalidValue)\"; "
         "docs/c-api.md: one that revokes the pool's own device's access is cudaErrorInvalidDevice. Got "
         << rn.err << " " << rn.msg);
    CHECK((rn.err == cudaErrorInvalidValue || rn.err == cudaErrorInvalidDevice));
    CHECK(rn.before == rn.after);
  }
  Cmd rw = ro;
  rw.arg = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(peer.call(rw).err == cudaSuccess);
  REQUIRE(peer.write(ra.id, 0, 4096, 3).err == cudaSuccess);
  const std::vector<unsigned char> wb = pattern(4096, 3);
  std::memcpy(a.mirror.data(), wb.data(), 4096);
  CHECK(get(s, a.p, a.size) == a.mirror);
  // An interior pointer of an import: refused, nothing changed, still mapped.
  const Reply interior = peer.free(ra.id, 512);
  CHECK(interior.err == cudaErrorInvalidValue);  // docs/c-api.md: "An interior pointer ... cudaErrorInvalidValue"
  CHECK(interior.before == interior.after);
  REQUIRE(peer.free(ra.id).err == cudaSuccess);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(peer.finish() == 0);
}

// ---------------------------------------------------------------------------
// Bad input at the exporter
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: the exporter's NULL arguments, bad handle types and bad pointers change nothing",
          "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Block a = new_block(pool, s, 3 * MiB + 17, 71);
  void* freed = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&freed, 4096, pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(freed, s) == cudaSuccess);
  s.synchronize();
  ScopedPool plain(0);
  void* plain_p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&plain_p, 4096, plain.get(), s) == cudaSuccess);
  const Snap before = snap(pool);
  int fd = -7;
  cudaMemPoolPtrExportData d{};
  {
    INFO("docs/c-api.md: sovaMemPoolExportToShareableHandle: \"fabric: cudaErrorNotSupported; flags, a pool created "
         "without cudaMemHandleTypePosixFileDescriptor, NULLs: cudaErrorInvalidValue\"");
    CHECK(sovaMemPoolExportToShareableHandle(nullptr, pool, kPosix, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, nullptr, kPosix, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, kPosix, 2) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeNone, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeWin32, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypeFabric, 0) == cudaErrorNotSupported);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, plain.get(), kPosix, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportToShareableHandle(&fd, reinterpret_cast<sovaMemPool_t>(std::uintptr_t{0x5}), kPosix, 0) ==
          cudaErrorInvalidValue);
    CHECK(fd == -7);  // no descriptor handed out
  }
  {
    INFO("sova.h: sovaMemPoolExportPointer: \"export data for the live block starting at ptr ... Anything else: "
         "cudaErrorInvalidValue\"");
    CHECK(sovaMemPoolExportPointer(nullptr, a.p) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportPointer(&d, nullptr) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportPointer(&d, a.p + 512) == cudaErrorInvalidValue);  // interior
    CHECK(sovaMemPoolExportPointer(&d, a.p + a.size - 1) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportPointer(&d, freed) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportPointer(&d, plain_p) == cudaErrorInvalidValue);  // a pool without a handle type
    int host = 0;
    CHECK(sovaMemPoolExportPointer(&d, &host) == cudaErrorInvalidValue);
  }
  CHECK(snap(pool) == before);
  // The refusals recorded nothing: exporting the block again gives the same data as before.
  cudaMemPoolPtrExportData again{};
  REQUIRE(sovaMemPoolExportPointer(&again, a.p) == cudaSuccess);
  CHECK(std::memcmp(&again, &a.data, sizeof again) == 0);
  // The importer of the exporting process itself: refused (docs/ipc.md), and ImportPointer on a pool that was
  // not imported.
  void* q = nullptr;
  CHECK(sovaMemPoolImportPointer(&q, pool, &a.data) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolImportPointer(&q, nullptr, &a.data) == cudaErrorInvalidValue);
  CHECK(snap(pool) == before);
  REQUIRE(sovaFreeAsync(plain_p, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  // A destroyed pool's handle.
  CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, kPosix, 0) == cudaErrorInvalidValue);
}

TEST_CASE("scenario ipc: pools created without a shareable handle type cannot be exported", "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  int fd = -7;
  cudaMemPoolPtrExportData d{};
  std::vector<sovaMemPool_t> pools{default_pool(0), default_pool(1)};
  ScopedPool plain(0), plain1(1);
  pools.push_back(plain.get());
  pools.push_back(plain1.get());
  for (sovaMemPool_t pool : pools) {
    void* p = nullptr;
    REQUIRE(sovaMallocFromPoolAsync(&p, 2 * MiB + 1, pool, s) == cudaSuccess);
    const Snap before = snap(pool);
    INFO("sova.h: \"The pool must have been created with handleTypes cudaMemHandleTypePosixFileDescriptor. ... a pool "
         "without that handle type ...: cudaErrorInvalidValue\"; sovaMemPoolExportPointer: \"of a pool created with a "
         "shareable handle type. Anything else: cudaErrorInvalidValue\"");
    CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, kPosix, 0) == cudaErrorInvalidValue);
    CHECK(sovaMemPoolExportPointer(&d, p) == cudaErrorInvalidValue);
    CHECK(fd == -7);
    CHECK(snap(pool) == before);
    REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  }
  // Creating with handle types: fabric is not supported; a bit that is no handle type is invalid.
  sovaMemPoolProps props = props_on(0);
  sovaMemPool_t made = nullptr;
  props.handleTypes = cudaMemHandleTypeFabric;
  CHECK(sovaMemPoolCreate(&made, &props) == cudaErrorNotSupported);  // docs/c-api.md sovaMemPoolCreate, step 4
  props.handleTypes = static_cast<cudaMemAllocationHandleType>(0x40);
  CHECK(sovaMemPoolCreate(&made, &props) == cudaErrorInvalidValue);  // step 2
  CHECK(made == nullptr);
  s.synchronize();
  settle();
}

// ---------------------------------------------------------------------------
// Trims and release thresholds on the exporter while imports are live
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc: trims, release thresholds and churn on the exporter leave a live import's memory alone",
          "[ipc][capi][scenario]") {
  for (const std::uint64_t seed : scenario_seeds({21, 42})) {
    INFO("seed " << seed << " (SOVA_SCENARIO_SEED=" << seed << " replays it)");
    std::mt19937_64 rng(seed);
    sim();
    settle();
    ScopedStream s;
    sovaMemPool_t pool = make_exportable(0, /*keep_memory=*/false);  // threshold 0: frees go back on their own
    Peer peer;
    const int ip = import_into(peer, pool);
    // Some unexported blocks around the exported ones, so that trims and remaps have work.
    std::vector<void*> others;
    for (int i = 0; i < 6; ++i) {
      void* p = nullptr;
      REQUIRE(sovaMallocFromPoolAsync(&p, random_size(rng), pool, s) == cudaSuccess);
      others.push_back(p);
    }
    std::vector<Block> held;
    for (int i = 0; i < 3; ++i) {
      Block b = new_block(pool, s, random_size(rng), rng());
      const Reply r = peer.import_ptr(ip, b.data);
      REQUIRE(r.err == cudaSuccess);
      b.peer_id = r.id;
      held.push_back(std::move(b));
    }
    std::uint64_t live_bytes = 0;
    for (const Block& b : held) live_bytes += b.size;
    for (int step = 0; step < 30; ++step) {
      INFO("step " << step);
      switch (rng() % 6) {
        case 0:
        case 1: {  // free an unexported block, or allocate one
          if (!others.empty() && rng() % 2 == 0) {
            const std::size_t i = rng() % others.size();
            REQUIRE(sovaFreeAsync(others[i], s) == cudaSuccess);
            others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
          } else {
            void* p = nullptr;
            REQUIRE(sovaMallocFromPoolAsync(&p, random_size(rng), pool, s) == cudaSuccess);
            others.push_back(p);
          }
          break;
        }
        case 2: {  // trim to something
          s.synchronize();
          const std::size_t keep = rng() % 2 == 0 ? 0 : rng() % (32 * MiB);
          REQUIRE(sovaMemPoolTrimTo(pool, keep) == cudaSuccess);
          const sovaMemPoolStats st = stats_of(pool);
          INFO("docs/c-api.md TrimTo: \"never memory under live blocks\"");
          CHECK(st.reservedCurrent >= st.usedCurrent);
          CHECK(st.reservedCurrent >= live_bytes);
          break;
        }
        case 3: {  // a release threshold
          std::uint64_t threshold = rng() % 2 == 0 ? 0 : rng() % (64 * MiB);
          REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
          break;
        }
        case 4: {  // the exporter writes a held block, the importer reads it
          Block& b = held[rng() % held.size()];
          const std::size_t off = rng() % b.size;
          const std::size_t len = 1 + rng() % (b.size - off);
          const std::vector<unsigned char> w = pattern(len, rng());
          put(s, b.p + off, w.data(), len);
          std::memcpy(b.mirror.data() + off, w.data(), len);
          const Reply rd = peer.read(b.peer_id, 0, b.size);
          INFO("docs/ipc.md: \"A live block's chunks never change\"");
          CHECK(rd.after.faults == rd.before.faults);
          CHECK(rd.value == fnv(b.mirror.data(), b.size));
          break;
        }
        default: {  // the importer writes a held block, the exporter reads it
          Block& b = held[rng() % held.size()];
          const std::size_t off = rng() % b.size;
          const std::size_t len = 1 + rng() % (b.size - off);
          const std::uint64_t ws = rng();
          REQUIRE(peer.write(b.peer_id, off, len, ws).err == cudaSuccess);
          const std::vector<unsigned char> w = pattern(len, ws);
          std::memcpy(b.mirror.data() + off, w.data(), len);
          INFO("docs/ipc.md: \"A live block's chunks never change\"");
          CHECK(get(s, b.p, b.size) == b.mirror);
          break;
        }
      }
    }
    // Everything unexported gone and trimmed: only the held blocks' memory stays, still shared.
    for (void* p : others) REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
    s.synchronize();
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    for (Block& b : held) {
      CHECK(get(s, b.p, b.size) == b.mirror);
      const Reply rd = peer.read(b.peer_id, 0, b.size);
      CHECK(rd.after.faults == rd.before.faults);
      CHECK(rd.value == fnv(b.mirror.data(), b.size));
    }
    for (Block& b : held) REQUIRE(peer.free(b.peer_id).err == cudaSuccess);
    for (Block& b : held) REQUIRE(sovaFreeAsync(b.p, s) == cudaSuccess);
    s.synchronize();
    REQUIRE(sovaMemPoolTrimTo(pool, 0) == cudaSuccess);
    CHECK(stats_of(pool).reservedCurrent == 0);
    const Counts end = peer.counts();
    CHECK(end.imported_handles == 0);
    CHECK(peer.destroy(ip).err == cudaSuccess);
    REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
    CHECK(peer.finish() == 0);
  }
}

// ---------------------------------------------------------------------------
// The C++ API (sova::PoolExporter / sova::ImportedPool), same rules
// ---------------------------------------------------------------------------

TEST_CASE("scenario ipc C++: PoolExporter and ImportedPool refusals", "[ipc][scenario]") {
  SimDriver local;
  PoolOptions o;
  o.driver = &local;
  {
    Pool plain(o);
    INFO("ipc.hpp: PoolExporter: \"Throws Error(cudaErrorInvalidValue) unless the pool's handle types include "
         "cudaMemHandleTypePosixFileDescriptor\"");
    bool threw = false;
    try {
      PoolExporter e(plain);
    } catch (const Error& e) {
      threw = true;
      CHECK(e.error() == cudaErrorInvalidValue);
    }
    CHECK(threw);
  }
  o.handle_types = cudaMemHandleTypePosixFileDescriptor;
  Pool pool(o);
  PoolExporter exporter(pool);
  cudaStream_t s = local.create_stream();
  auto* p = static_cast<unsigned char*>(pool.allocate(3 * MiB, s));
  cudaMemPoolPtrExportData d{}, d2{};
  CHECK(exporter.export_pointer(p + 512, &d) == cudaErrorInvalidValue);  // "the live block starting at ptr"
  CHECK(exporter.export_pointer(nullptr, &d) == cudaErrorInvalidValue);
  REQUIRE(exporter.export_pointer(p, &d) == cudaSuccess);
  REQUIRE(exporter.export_pointer(p, &d2) == cudaSuccess);
  CHECK(std::memcmp(&d, &d2, sizeof d) == 0);
  const int fd = exporter.share();
  REQUIRE(fd >= 0);
  {
    INFO("ipc.hpp: ImportedPool: \"Throws Error: cudaErrorInvalidValue for a closed descriptor, one that is not a "
         "sova pool handle, an exporter gone, or an exporter in this very process\"");
    ImportOptions io;
    io.driver = &local;
    for (int bad : {fd, -1}) {
      INFO("descriptor " << bad);
      bool threw = false;
      try {
        ImportedPool ip(bad, io);
      } catch (const Error& e) {
        threw = true;
        CHECK(e.error() == cudaErrorInvalidValue);
      }
      CHECK(threw);
    }
  }
  // forget(): the data goes stale; the importer (another process) is refused.
  Peer peer;
  const int ip = peer.import_pool(fd);
  ::close(fd);
  const Reply live = peer.import_ptr(ip, d);
  REQUIRE(live.err == cudaSuccess);
  REQUIRE(peer.free(live.id).err == cudaSuccess);
  exporter.forget(p);
  check_refused(peer.import_ptr(ip, d), "ipc.hpp: forget: \"data exported for it is stale from now on (importers "
                                        "get cudaErrorInvalidValue)\"");
  // Exported again after forget: fresh data that imports.
  cudaMemPoolPtrExportData d3{};
  REQUIRE(exporter.export_pointer(p, &d3) == cudaSuccess);
  const Reply again = peer.import_ptr(ip, d3);
  INFO("peer: " << again.msg);
  CHECK(again.err == cudaSuccess);
  if (again.err == cudaSuccess) REQUIRE(peer.free(again.id).err == cudaSuccess);
  exporter.deallocate(p, s);
  check_refused(peer.import_ptr(ip, d3), "ipc.hpp: deallocate: \"forget(ptr), then pool.deallocate(ptr, stream)\"");
  CHECK(peer.destroy(ip).err == cudaSuccess);
  CHECK(peer.finish() == 0);
  REQUIRE(local.stream_synchronize(s) == cudaSuccess);
  local.destroy_stream(s);
}

// ---------------------------------------------------------------------------
// Two findings of these tests, fixed: changed export data, and nobody answering
// ---------------------------------------------------------------------------

// docs/ipc.md, Security: "Malformed data (bad magic, version or checksum, or a byte the checksum does not cover
// that is not zero) ... give cudaErrorInvalidValue and change nothing". Bytes 6, 7 and 48..63 were once
// accepted changed (the import named the same block).
TEST_CASE("scenario ipc: every single-byte change of the export data is refused", "[ipc][capi][scenario]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  Block a = new_block(pool, s, MiB, 81);
  Peer peer;
  const int ip = import_into(peer, pool);
  std::vector<int> accepted;
  for (std::size_t i = 0; i < sizeof(cudaMemPoolPtrExportData); ++i) {
    cudaMemPoolPtrExportData bad = a.data;
    reinterpret_cast<unsigned char*>(&bad)[i] ^= 0x5a;
    const Reply r = peer.import_ptr(ip, bad);
    if (r.err == cudaSuccess) {
      accepted.push_back(static_cast<int>(i));
      REQUIRE(peer.free(r.id).err == cudaSuccess);
    }
  }
  std::ostringstream os;
  for (int i : accepted) os << i << ' ';
  INFO(kDocMalformed);
  INFO("accepted with byte i ^= 0x5a, for i = " << os.str());
  CHECK(accepted.empty());
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  CHECK(peer.destroy(ip).err == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
  CHECK(peer.finish() == 0);
}

// docs/ipc.md, Security: "... a descriptor that is not a sova pool handle (not a socket, or nobody answers within
// 10 s) ... all give cudaErrorInvalidValue"; sova.h: "one that is not a sova pool handle ...:
// cudaErrorInvalidValue". sovaMemPoolImportFromShareableHandle on a Unix socket whose other end is open but never
// answers once did not return. The bound below is a liveness limit, not a timing claim (the import gives up after
// 10 s); SOVA_IPC_NOBODY_ANSWERS_MS changes it.
TEST_CASE("scenario ipc: importing from a socket nobody answers on returns cudaErrorInvalidValue",
          "[ipc][capi][scenario]") {
  sim();
  int limit_ms = 30000;
  if (const char* env = std::getenv("SOVA_IPC_NOBODY_ANSWERS_MS"); env != nullptr && *env != '\0')
    limit_ms = std::atoi(env);
  Peer peer;
  Cmd c;
  c.op = kImportBadFd;
  c.arg = 3;
  const Reply r = peer.call(c, -1, limit_ms);
  check_refused(r, kDocMalformed);
  CHECK(r.addr == 0);
  CHECK(peer.finish() == 0);
}

// docs/sleep-wake.md, "Rules for the caller": "A pool exported through the C API
// (sovaMemPoolExportToShareableHandle) is refused sleep (cudaErrorNotPermitted, nothing
// done): its importers map its physical memory themselves." Sleep once returned
// cudaSuccess, and after wake the importer no longer saw the exporter's writes.
TEST_CASE("scenario ipc: an exported pool refuses sleep and keeps its memory", "[ipc][capi][scenario][sleep]") {
  sim();
  settle();
  ScopedStream s;
  sovaMemPool_t pool = make_exportable();
  void* first = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&first, MiB, pool, s) == cudaSuccess);
  CHECK(sovaMemPoolSleep(pool, sovaSleepBackup, s) == cudaSuccess);  // exportable, nothing exported yet
  CHECK(sovaMemPoolWake(pool, s) == cudaSuccess);
  REQUIRE(sovaFreeAsync(first, s) == cudaSuccess);
  Block a = new_block(pool, s, MiB, 91);  // exports the block's pointer
  const int fd = share(pool);
  const std::uint64_t physical = sim().counters().physical_bytes;
  for (sovaSleepMode mode : {sovaSleepBackup, sovaSleepDiscard, sovaSleepDiscardZeroed}) {
    INFO("mode " << static_cast<int>(mode));
    CHECK(sovaMemPoolSleep(pool, mode, s) == cudaErrorNotPermitted);
    CHECK(std::string(sovaGetLastErrorMessage()).find("exported") != std::string::npos);
    int asleep = -1;
    REQUIRE(sovaMemPoolIsAsleep(pool, &asleep) == cudaSuccess);
    CHECK(asleep == 0);
    CHECK(sim().counters().physical_bytes == physical);  // nothing released
  }
  ::close(fd);
  REQUIRE(sovaFreeAsync(a.p, s) == cudaSuccess);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
