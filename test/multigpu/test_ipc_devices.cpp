// IPC across devices and processes (docs/ipc.md): a pool of device 0
// exported by this process and imported by another for device 1
// (ImportOptions::device); device 1 reads and writes the memory there, and a
// read-only import reads it with the driver's mapping read-only for device 1.
// The peer is this binary again (test/conformance/peer_process.hpp).
#include "conformance/peer_process.hpp"
#include "ipc/protocol.hpp"
#include "multigpu/require_devices.hpp"

#include <sova/ipc.hpp>
#include <sova/pool.hpp>

#include <unistd.h>

using namespace sova;
using namespace sova::multigpu;
using ipc_detail::receive_message;
using ipc_detail::send_message;

namespace {

constexpr std::uint32_t kTagA = 0xA11C'E5EDu;
constexpr std::uint32_t kTagB = 0xB0B0'CAFEu;
constexpr std::size_t kBytesA = 3 * kMiB;
constexpr std::size_t kBytesB = 96 * kMiB;  // several chunks

struct Control {
  cudaMemPoolPtrExportData a{};  ///< written by the exporter (device 0) with kTagA
  cudaMemPoolPtrExportData b{};  ///< written by the importer (device 1) with kTagB
  int step = 0;
};

// One shareable handle per importer: share() makes a connection each.
void send_control(int socket, const Control& c, const int* fds = nullptr, std::size_t nfds = 0) {
  REQUIRE(send_message(socket, &c, sizeof c, fds, nfds));
}

Control receive_control(int socket, int* fds = nullptr, std::size_t want_fds = 0) {
  Control c;
  int got[4];
  std::size_t n = 0;
  REQUIRE(receive_message(socket, &c, sizeof c, got, 4, &n) == static_cast<long>(sizeof c));
  REQUIRE(n == want_fds);
  for (std::size_t i = 0; i < n; ++i) fds[i] = got[i];
  return c;
}

}  // namespace

TEST_CASE("multigpu ipc: a device-0 pool imported for device 1 in another process; data crosses both ways",
          "[multigpu][ipc]") {
  SOVA_REQUIRE_DEVICES(2);
  PoolOptions options;
  options.device = 0;
  options.handle_types = cudaMemHandleTypePosixFileDescriptor;
  Pool pool(options);
  PoolExporter exporter(pool);
  DeviceStream s0(0);
  void* a = pool.allocate(kBytesA, s0);
  void* b = pool.allocate(kBytesB, s0);
  fill(a, kBytesA, kTagA, s0);
  fill(b, kBytesB, 0, s0);
  s0.synchronize();

  Control control;
  REQUIRE(exporter.export_pointer(a, &control.a) == cudaSuccess);
  REQUIRE(exporter.export_pointer(b, &control.b) == cudaSuccess);
  int handles[2];
  for (int& h : handles) {
    cudaError_t shared = cudaErrorUnknown;
    h = exporter.share(&shared);
    REQUIRE(shared == cudaSuccess);
  }

  sova::test::PeerProcess peer("multigpu ipc peer: importer on device 1");
  send_control(peer.socket(), control, handles, 2);
  for (int h : handles) ::close(h);
  const Control done = receive_control(peer.socket());
  CHECK(done.step == 1);
  // The peer's device 1 wrote kTagB into b and synchronized before answering.
  CHECK(count_wrong(b, kBytesB, kTagB, s0) == 0);
  CHECK(count_wrong(a, kBytesA, kTagA, s0) == 0);  // its read-only import wrote nothing
  CHECK(peer.wait() == 0);
  exporter.deallocate(a, s0);
  exporter.deallocate(b, s0);
}

TEST_CASE("multigpu ipc peer: importer on device 1", "[.peer]") {
  const int socket = sova::test::peer_socket();
  REQUIRE(socket >= 0);
  int handles[2] = {-1, -1};
  const Control control = receive_control(socket, handles, 2);
  DeviceStream s1(1);
  {
    ImportOptions options;
    options.device = 1;
    ImportedPool imported(handles[0], options);
    void* a = nullptr;
    void* b = nullptr;
    REQUIRE(imported.import_pointer(control.a, &a) == cudaSuccess);
    REQUIRE(imported.import_pointer(control.b, &b) == cudaSuccess);
    CHECK(mapped_access(a, 1) == cudaMemAccessFlagsProtReadWrite);
    CHECK(mapped_access(b, 1) == cudaMemAccessFlagsProtReadWrite);
    CHECK(mapped_access(a, 0) == cudaMemAccessFlagsProtNone);  // mapped for device 1 only
    CHECK(count_wrong(a, kBytesA, kTagA, s1) == 0);
    fill(b, kBytesB, kTagB, s1);
    s1.synchronize();
    // Access changed there: read-only, then back.
    REQUIRE(imported.set_access(cudaMemAccessFlagsProtRead) == cudaSuccess);
    CHECK(imported.access() == cudaMemAccessFlagsProtRead);
    CHECK(mapped_access(a, 1) == cudaMemAccessFlagsProtRead);
    CHECK(count_wrong(b, kBytesB, kTagB, s1) == 0);
    REQUIRE(imported.set_access(cudaMemAccessFlagsProtReadWrite) == cudaSuccess);
    CHECK(mapped_access(b, 1) == cudaMemAccessFlagsProtReadWrite);
    CHECK(imported.free_pointer(a, s1) == cudaSuccess);
    CHECK(imported.free_pointer(b, s1) == cudaSuccess);
  }
  {
    // A read-only import from the start.
    ImportOptions options;
    options.device = 1;
    options.access = cudaMemAccessFlagsProtRead;
    ImportedPool imported(handles[1], options);
    void* a = nullptr;
    REQUIRE(imported.import_pointer(control.a, &a) == cudaSuccess);
    CHECK(imported.access() == cudaMemAccessFlagsProtRead);
    CHECK(mapped_access(a, 1) == cudaMemAccessFlagsProtRead);
    CHECK(count_wrong(a, kBytesA, kTagA, s1) == 0);
    CHECK(imported.free_pointer(a, s1) == cudaSuccess);
  }
  for (int h : handles) ::close(h);
  Control done;
  done.step = 1;
  send_control(socket, done);
}
