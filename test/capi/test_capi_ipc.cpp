// C API IPC on the simulation: a pool exported with
// sovaMemPoolExportToShareableHandle to a second process (this binary again,
// conformance/peer_process.hpp), which imports it and a pointer, reads what
// this process wrote and writes an answer; plus the refusals.
#include "capi/capi_test_util.hpp"
#include "conformance/peer_process.hpp"
#include "ipc/protocol.hpp"

#include <cstring>

using namespace sova::capi_test;
using sova::ipc_detail::receive_message;
using sova::ipc_detail::send_message;

namespace {
struct Message {
  cudaMemPoolPtrExportData data{};
  int step = 0;
};
constexpr std::size_t kBytes = 5 * MiB;
}  // namespace

TEST_CASE("capi: IPC export, import, read and write across processes", "[capi][ipc]") {
  sim();
  sovaMemPoolProps props = props_on(0);
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  ScopedStream s;
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, kBytes, pool, s) == cudaSuccess);
  fill_on(s, p, kBytes, 0x5e);
  s.synchronize();
  Message m;
  REQUIRE(sovaMemPoolExportPointer(&m.data, p) == cudaSuccess);
  int fd = -1;
  REQUIRE(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) == cudaSuccess);
  REQUIRE(fd >= 0);

  sova::test::PeerProcess peer("capi ipc peer");
  REQUIRE(send_message(peer.socket(), &m, sizeof m, &fd, 1));
  ::close(fd);
  Message done;
  int none[1];
  std::size_t n = 0;
  REQUIRE(receive_message(peer.socket(), &done, sizeof done, none, 1, &n) == static_cast<long>(sizeof done));
  CHECK(done.step == 1);
  CHECK(holds(p, kBytes, 0x71));  // the peer's answer, written and synchronized before its message
  CHECK(peer.wait() == 0);
  REQUIRE(sovaFreeAsync(p, s) == cudaSuccess);
  // Freed: its export data is refused from now on, here too.
  CHECK(sovaMemPoolExportPointer(&m.data, p) == cudaErrorInvalidValue);
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}

TEST_CASE("capi ipc peer", "[.peer]") {
  const int control = sova::test::peer_socket();
  REQUIRE(control >= 0);
  sim();
  Message m;
  int fds[1];
  std::size_t n = 0;
  REQUIRE(receive_message(control, &m, sizeof m, fds, 1, &n) == static_cast<long>(sizeof m));
  REQUIRE(n == 1);
  sovaMemPool_t imported = nullptr;
  REQUIRE(sovaMemPoolImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fds[0])),
                                               cudaMemHandleTypePosixFileDescriptor, 0) == cudaSuccess);
  ::close(fds[0]);
  void* p = nullptr;
  REQUIRE(sovaMemPoolImportPointer(&p, imported, &m.data) == cudaSuccess);
  CHECK(holds(p, kBytes, 0x5e));
  // An imported pool cannot allocate; access is read-only or read-write for its device.
  void* q = nullptr;
  CHECK(sovaMallocFromPoolAsync(&q, 512, imported, nullptr) == cudaErrorInvalidValue);
  cudaMemAccessDesc ro{};
  ro.location.type = cudaMemLocationTypeDevice;
  ro.location.id = 0;
  ro.flags = cudaMemAccessFlagsProtRead;
  REQUIRE(sovaMemPoolSetAccess(imported, &ro, 1) == cudaSuccess);
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  cudaMemLocation where = ro.location;
  REQUIRE(sovaMemPoolGetAccess(&flags, imported, &where) == cudaSuccess);
  CHECK(flags == cudaMemAccessFlagsProtRead);
  ro.location.id = 1;
  CHECK(sovaMemPoolSetAccess(imported, &ro, 1) == cudaErrorInvalidDevice);
  ro.location.id = 0;
  ro.flags = cudaMemAccessFlagsProtReadWrite;
  REQUIRE(sovaMemPoolSetAccess(imported, &ro, 1) == cudaSuccess);

  ScopedStream s;
  fill_on(s, p, kBytes, 0x71);
  s.synchronize();
  CHECK(sovaFreeAsync(p, s) == cudaSuccess);
  CHECK(sovaFreeAsync(p, s) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolDestroy(imported) == cudaSuccess);
  CHECK(sovaMemPoolDestroy(imported) == cudaErrorInvalidValue);
  Message done;
  done.step = 1;
  REQUIRE(send_message(control, &done, sizeof done, nullptr, 0));
}

TEST_CASE("capi: IPC refusals change nothing", "[capi][ipc]") {
  sim();
  ScopedPool plain(0);
  int fd = -1;
  CHECK(sovaMemPoolExportToShareableHandle(&fd, plain.get(), cudaMemHandleTypePosixFileDescriptor, 0) ==
        cudaErrorInvalidValue);  // created without a handle type
  CHECK(sovaMemPoolExportToShareableHandle(&fd, plain.get(), cudaMemHandleTypeFabric, 0) == cudaErrorNotSupported);
  CHECK(sovaMemPoolExportToShareableHandle(nullptr, plain.get(), cudaMemHandleTypePosixFileDescriptor, 0) ==
        cudaErrorInvalidValue);
  CHECK(fd == -1);
  void* p = nullptr;
  REQUIRE(sovaMallocFromPoolAsync(&p, 4096, plain.get(), nullptr) == cudaSuccess);
  cudaMemPoolPtrExportData data{};
  CHECK(sovaMemPoolExportPointer(&data, p) == cudaErrorInvalidValue);
  REQUIRE(sovaFreeAsync(p, nullptr) == cudaSuccess);

  sovaMemPoolProps props = props_on(0);
  props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaMemPoolCreate(&pool, &props) == cudaSuccess);
  REQUIRE(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0) == cudaSuccess);
  CHECK(sovaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 1) ==
        cudaErrorInvalidValue);  // flags
  sovaMemPool_t imported = nullptr;
  CHECK(sovaMemPoolImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0) == cudaErrorInvalidValue);
  ::close(fd);
  CHECK(sovaMemPoolImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                             cudaMemHandleTypePosixFileDescriptor, 0) == cudaErrorInvalidValue);
  CHECK(sovaMemPoolImportFromShareableHandle(&imported, nullptr, cudaMemHandleTypeFabric, 0) == cudaErrorNotSupported);
  CHECK(imported == nullptr);
  CHECK(sovaMemPoolImportPointer(&p, pool, &data) == cudaErrorInvalidValue);  // not an imported pool
  REQUIRE(sovaMemPoolDestroy(pool) == cudaSuccess);
}
