// IPC (docs/ipc.md), on the simulation and on the GPU alike: two processes (this
// binary and a peer started from it, peer_process.hpp) exchange a pool
// handle over a Unix socket and pointer export data, and data written by one
// is read by the other in stream order: the writer synchronizes its stream,
// then sends a message; the reader's stream work comes after the message.
// The peer checks its side with Catch assertions and reports through its
// exit status and a last message.
#include "conformance/peer_process.hpp"
#include "conformance/pool_fixture.hpp"
#include "ipc/protocol.hpp"
#include "sim_driver/sim_test_util.hpp"

#include <sova/ipc.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

using namespace sova;
using namespace sova::test;
using ipc_detail::receive_message;
using ipc_detail::send_message;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::uint32_t kTagA = 0xA11CE5ED;
constexpr std::uint32_t kTagB = 0xB0B0CAFE;
constexpr std::size_t kBytesA = 3 * kMiB;
constexpr std::size_t kBytesB = 40 * kMiB;  // more than one 32 MiB chunk

/// What the two sides tell each other besides the pool descriptor.
struct Control {
  cudaMemPoolPtrExportData a{};      ///< written by its owner with kTagA
  cudaMemPoolPtrExportData b{};      ///< written by the other side with kTagB
  cudaMemPoolPtrExportData stale{};  ///< a block freed after export
  int step = 0;
};

PoolOptions exportable(TestDevice& device) {
  PoolOptions o = options_on(device);
  o.handle_types = cudaMemHandleTypePosixFileDescriptor;
  return o;
}

void send_control(int socket, const Control& c, int fd = -1) {
  REQUIRE(send_message(socket, &c, sizeof c, &fd, fd >= 0 ? 1 : 0));
}

/// Receives a Control (and the descriptor sent with it, if any).
Control receive_control(int socket, int* fd = nullptr) {
  Control c;
  int fds[4];
  std::size_t n = 0;
  REQUIRE(receive_message(socket, &c, sizeof c, fds, 4, &n) == static_cast<long>(sizeof c));
  if (fd != nullptr) {
    REQUIRE(n == 1);
    *fd = fds[0];
  } else {
    for (std::size_t i = 0; i < n; ++i) ::close(fds[i]);
  }
  return c;
}

std::uint64_t mismatches_after(TestDevice& device, cudaStream_t s) {
  device.synchronize(s);
  return device.mismatches();
}

}  // namespace

TEST_CASE("ipc: a pool exported to another process; data crosses both ways in stream order", "[ipc][vmm]") {
  TestDevice& device = test_device();
  Pool pool(exportable(device));
  PoolExporter exporter(pool);
  ScopedStream s(device);
  void* a = pool.allocate(kBytesA, s);
  void* b = pool.allocate(kBytesB, s);
  void* c = pool.allocate(kMiB, s);
  device.fill(a, kBytesA, kTagA, s);
  device.fill(b, kBytesB, 0, s);
  device.synchronize(s);  // written before the peer hears of it

  Control control;
  REQUIRE(exporter.export_pointer(a, &control.a) == cudaSuccess);
  REQUIRE(exporter.export_pointer(b, &control.b) == cudaSuccess);
  REQUIRE(exporter.export_pointer(c, &control.stale) == cudaSuccess);
  exporter.deallocate(c, s);  // its export data is stale from here on
  cudaError_t shared = cudaErrorUnknown;
  const int handle = exporter.share(&shared);
  REQUIRE(shared == cudaSuccess);
  REQUIRE(handle >= 0);

  PeerProcess peer("ipc peer: importer");
  send_control(peer.socket(), control, handle);
  ::close(handle);  // the peer has its own now
  const Control done = receive_control(peer.socket());
  CHECK(done.step == 1);
  // The peer wrote kTagB into b and synchronized before answering.
  device.reset_mismatches();
  device.expect(b, kBytesB, kTagB, s);
  CHECK(mismatches_after(device, s) == 0);
  CHECK(peer.wait() == 0);
  exporter.deallocate(a, s);
  exporter.deallocate(b, s);
  pool.check_invariants();
}

TEST_CASE("ipc peer: importer", "[.peer]") {
  const int control_socket = peer_socket();
  REQUIRE(control_socket >= 0);
  TestDevice& device = test_device();
  int handle = -1;
  const Control control = receive_control(control_socket, &handle);
  ImportOptions options;
  options.driver = &device.driver();
  options.device = device.ordinal();
  ImportedPool imported(handle, options);
  ::close(handle);  // ImportedPool keeps its own descriptor
  ScopedStream s(device);

  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(imported.import_pointer(control.a, &a) == cudaSuccess);
  REQUIRE(imported.import_pointer(control.b, &b) == cudaSuccess);
  CHECK(imported.contains(a));
  device.reset_mismatches();
  device.expect(a, kBytesA, kTagA, s);  // written by the exporter
  CHECK(mismatches_after(device, s) == 0);
  device.fill(b, kBytesB, kTagB, s);  // read by the exporter
  device.synchronize(s);

  // Importing the same block again gives the same address.
  void* again = nullptr;
  CHECK(imported.import_pointer(control.a, &again) == cudaSuccess);
  CHECK(again == a);
  // Bad export data changes nothing: stale, corrupted, garbage.
  void* bad = reinterpret_cast<void*>(0x1);
  CHECK(imported.import_pointer(control.stale, &bad) == cudaErrorInvalidValue);
  cudaMemPoolPtrExportData corrupt = control.b;
  corrupt.reserved[20] ^= 0x40;
  CHECK(imported.import_pointer(corrupt, &bad) == cudaErrorInvalidValue);
  cudaMemPoolPtrExportData zeros{};
  CHECK(imported.import_pointer(zeros, &bad) == cudaErrorInvalidValue);
  CHECK(bad == reinterpret_cast<void*>(0x1));

  // Read-only access: reads still work; on the simulation a write faults.
  REQUIRE(imported.set_access(cudaMemAccessFlagsProtRead) == cudaSuccess);
  CHECK(imported.access() == cudaMemAccessFlagsProtRead);
  device.reset_mismatches();
  device.expect(a, kBytesA, kTagA, s);
  CHECK(mismatches_after(device, s) == 0);
  if (std::string(device.name()) == "sim") {
    CHECK(simtest::touch_faults(static_cast<volatile char*>(a), /*write=*/true));
    CHECK_FALSE(simtest::touch_faults(static_cast<volatile char*>(a), /*write=*/false));
  }
  CHECK(imported.set_access(cudaMemAccessFlagsProtNone) == cudaErrorInvalidValue);
  REQUIRE(imported.set_access(cudaMemAccessFlagsProtReadWrite) == cudaSuccess);

  CHECK(imported.free_pointer(a, s) == cudaSuccess);
  CHECK(imported.free_pointer(a, s) == cudaErrorInvalidValue);  // once
  CHECK(imported.free_pointer(static_cast<char*>(b) + 512, s) == cudaErrorInvalidValue);
  CHECK(imported.free_pointer(b, s) == cudaSuccess);
  // And imports again after the frees (the chunks are mapped anew).
  REQUIRE(imported.import_pointer(control.a, &a) == cudaSuccess);
  device.reset_mismatches();
  device.expect(a, kBytesA, kTagA, s);
  CHECK(mismatches_after(device, s) == 0);
  CHECK(imported.free_pointer(a, s) == cudaSuccess);

  Control done;
  done.step = 1;
  send_control(control_socket, done);
}

TEST_CASE("ipc: the exporter exiting first leaves the importer's mappings valid", "[ipc][vmm]") {
  TestDevice& device = test_device();
  PeerProcess peer("ipc peer: exporter that exits");
  int handle = -1;
  const Control control = receive_control(peer.socket(), &handle);
  ImportOptions options;
  options.driver = &device.driver();
  options.device = device.ordinal();
  ImportedPool imported(handle, options);
  ::close(handle);
  void* a = nullptr;
  REQUIRE(imported.import_pointer(control.a, &a) == cudaSuccess);
  Control imported_now;
  imported_now.step = 1;
  send_control(peer.socket(), imported_now);
  CHECK(peer.wait() == 0);  // the exporter is gone, its pool destroyed

  ScopedStream s(device);
  device.reset_mismatches();
  device.expect(a, kBytesA, kTagA, s);
  CHECK(mismatches_after(device, s) == 0);
  void* b = reinterpret_cast<void*>(0x1);
  CHECK(imported.import_pointer(control.b, &b) == cudaErrorInvalidValue);  // nobody answers
  CHECK(b == reinterpret_cast<void*>(0x1));
  CHECK(imported.free_pointer(a, s) == cudaSuccess);
}

TEST_CASE("ipc peer: exporter that exits", "[.peer]") {
  const int control_socket = peer_socket();
  REQUIRE(control_socket >= 0);
  TestDevice& device = test_device();
  Pool pool(exportable(device));
  PoolExporter exporter(pool);
  ScopedStream s(device);
  void* a = pool.allocate(kBytesA, s);
  void* b = pool.allocate(kMiB, s);
  device.fill(a, kBytesA, kTagA, s);
  device.synchronize(s);
  Control control;
  REQUIRE(exporter.export_pointer(a, &control.a) == cudaSuccess);
  REQUIRE(exporter.export_pointer(b, &control.b) == cudaSuccess);
  const int handle = exporter.share();
  REQUIRE(handle >= 0);
  send_control(control_socket, control, handle);
  ::close(handle);
  CHECK(receive_control(control_socket).step == 1);
  // Returning ends the process: the exporter stops, the pool releases its memory.
}

TEST_CASE("ipc: bad handles and imports into the exporting process are refused", "[ipc][vmm]") {
  TestDevice& device = test_device();
  ImportOptions options;
  options.driver = &device.driver();
  options.device = device.ordinal();
  auto refused = [&](int fd) {
    try {
      ImportedPool p(fd, options);
      return cudaSuccess;
    } catch (const Error& e) {
      return e.error();
    }
  };
  {
    Pool plain(options_on(device));
    CHECK_THROWS_AS(PoolExporter(plain), Error);  // made without a shareable handle type
  }
  Pool pool(exportable(device));
  PoolExporter exporter(pool);
  const int handle = exporter.share();
  REQUIRE(handle >= 0);
  CHECK(refused(handle) == cudaErrorInvalidValue);  // this very process
  ::close(handle);
  CHECK(refused(handle) == cudaErrorInvalidValue);  // closed
  CHECK(refused(-1) == cudaErrorInvalidValue);
  const int file = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(refused(file) == cudaErrorInvalidValue);  // not a socket
  ::close(file);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0);
  ::close(pair[1]);
  CHECK(refused(pair[0]) == cudaErrorInvalidValue);  // a socket nobody answers
  ::close(pair[0]);

  ScopedStream s(device);
  void* p = pool.allocate(kMiB, s);
  cudaMemPoolPtrExportData data{};
  CHECK(exporter.export_pointer(static_cast<char*>(p) + 512, &data) == cudaErrorInvalidValue);  // interior
  int on_stack = 0;
  CHECK(exporter.export_pointer(&on_stack, &data) == cudaErrorInvalidValue);
  CHECK(exporter.export_pointer(p, nullptr) == cudaErrorInvalidValue);
  exporter.deallocate(p, s);
  CHECK(exporter.export_pointer(p, &data) == cudaErrorInvalidValue);  // freed
}
