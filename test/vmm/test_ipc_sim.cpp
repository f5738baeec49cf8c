// IPC on the simulation, beyond the conformance suite: a block under more
// chunks than one reply message carries (64), and export data that stays
// the same when a block is exported twice.
#include "conformance/peer_process.hpp"
#include "ipc/protocol.hpp"

#include <sova/ipc.hpp>
#include <sova/sim.hpp>

#include <unistd.h>

#include <cstring>

using namespace sova;
using ipc_detail::receive_message;
using ipc_detail::send_message;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kBytes = 160 * kMiB;  // 80 chunks of 2 MiB
}  // namespace

TEST_CASE("ipc (sim): a block of 80 chunks crosses in several messages", "[ipc][sim_ipc]") {
  SimDriver sim;
  PoolOptions o;
  o.driver = &sim;
  o.handle_types = cudaMemHandleTypePosixFileDescriptor;
  o.max_chunk = 2 * kMiB;
  Pool pool(o);
  PoolExporter exporter(pool);
  cudaStream_t s = sim.create_stream();
  // Grown a granule at a time so that the block lies over many chunks.
  std::vector<void*> steps;
  for (int i = 0; i < 80; ++i) steps.push_back(pool.allocate(2 * kMiB, s));
  for (void* p : steps) pool.deallocate(p, s);
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  pool.stream_synchronized(s);
  auto* p = static_cast<unsigned char*>(pool.allocate(kBytes, s));
  std::vector<Pool::ChunkView> chunks;
  REQUIRE(pool.chunks_under(p, kBytes, &chunks) == cudaSuccess);
  REQUIRE(chunks.size() > 64);
  for (std::size_t i = 0; i < kBytes; i += 4096) p[i] = static_cast<unsigned char>(i / 4096 * 7);
  cudaMemPoolPtrExportData data{}, again{};
  REQUIRE(exporter.export_pointer(p, &data) == cudaSuccess);
  REQUIRE(exporter.export_pointer(p, &again) == cudaSuccess);
  CHECK(std::memcmp(&data, &again, sizeof data) == 0);  // the same block, the same data
  const int handle = exporter.share();
  REQUIRE(handle >= 0);
  test::PeerProcess peer("ipc peer (sim): many chunks");
  REQUIRE(send_message(peer.socket(), &data, sizeof data, &handle, 1));
  ::close(handle);
  char done = 0;
  CHECK(::read(peer.socket(), &done, 1) == 1);
  CHECK(done == 1);
  CHECK(peer.wait() == 0);
  exporter.deallocate(p, s);
  sim.destroy_stream(s);
}

TEST_CASE("ipc peer (sim): many chunks", "[.peer]") {
  const int control = test::peer_socket();
  REQUIRE(control >= 0);
  SimDriver sim;
  cudaMemPoolPtrExportData data{};
  int fds[1];
  std::size_t n = 0;
  REQUIRE(receive_message(control, &data, sizeof data, fds, 1, &n) == static_cast<long>(sizeof data));
  REQUIRE(n == 1);
  ImportOptions options;
  options.driver = &sim;
  ImportedPool imported(fds[0], options);
  ::close(fds[0]);
  void* ptr = nullptr;
  REQUIRE(imported.import_pointer(data, &ptr) == cudaSuccess);
  const auto* p = static_cast<const unsigned char*>(ptr);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kBytes; i += 4096) wrong += p[i] != static_cast<unsigned char>(i / 4096 * 7);
  CHECK(wrong == 0);
  CHECK(sim.counters().imported_handles == 0);  // handles released once mapped: the mappings hold the memory
  CHECK(imported.free_pointer(ptr, nullptr) == cudaSuccess);
  const char done = 1;
  REQUIRE(::write(control, &done, 1) == 1);
}
