// GrowableBuffer and sovaGrowable* on the simulation: the address never
// changes, contents survive growth, physical memory follows the size both
// ways, and refused resizes change nothing.
#include "support/catch.hpp"

#include "capi/capi_test_util.hpp"
#include "sim_driver/sim_test_util.hpp"

#include <sova/growable.hpp>
#include <sova/sim.hpp>
#include <sova/sova.h>

#include <cstring>

using namespace sova;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;

GrowableOptions on(SimDriver& sim, std::size_t max_chunk = std::size_t{256} << 20) {
  GrowableOptions o;
  o.driver = &sim;
  o.max_chunk = max_chunk;
  return o;
}
}  // namespace

TEST_CASE("growable: grows in place, keeps its contents, and holds only what its size needs", "[vmm][growable]") {
  SimConfig config;
  config.total_memory = std::size_t{512} << 20;
  SimDriver sim(config);
  GrowableBuffer buf(std::size_t{400} << 20, on(sim, 8 * kMiB));
  auto* p = static_cast<unsigned char*>(buf.data());
  CHECK(buf.size() == 0);
  CHECK(buf.physical_bytes() == 0);
  CHECK(sim.counters().physical_bytes == 0);
  cudaStream_t s = sim.create_stream();

  std::size_t size = kMiB;
  REQUIRE(buf.resize(size, s) == cudaSuccess);
  std::memset(p, 1, size);
  while (size < std::size_t{250} << 20) {
    const std::size_t next = size + size / 2 + 3;  // not granule multiples
    REQUIRE(buf.resize(next, s) == cudaSuccess);
    CHECK(buf.data() == static_cast<void*>(p));
    CHECK(buf.physical_bytes() == (next + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB));
    CHECK(sim.counters().physical_bytes == buf.physical_bytes());
    // Old bytes kept, new bytes usable (device work, in stream order).
    CHECK(p[0] == 1);
    CHECK(p[size - 1] == (size == kMiB ? 1 : 2));
    sim.launch(s, [p, size, next] { std::memset(p + size, 2, next - size); });
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    size = next;
  }
  CHECK(p[size - 1] == 2);

  // Shrinking releases whole chunks beyond the new size (8 MiB chunks here).
  REQUIRE(buf.resize(20 * kMiB, s) == cudaSuccess);
  CHECK(buf.size() == 20 * kMiB);
  CHECK(buf.physical_bytes() >= 20 * kMiB);
  CHECK(buf.physical_bytes() <= 20 * kMiB + 8 * kMiB);
  CHECK(p[20 * kMiB - 1] == 2);
  CHECK(simtest::touch_faults(reinterpret_cast<volatile char*>(p + buf.physical_bytes()), false));
  REQUIRE(buf.resize(0, s) == cudaSuccess);
  CHECK(buf.physical_bytes() == 0);
  CHECK(sim.counters().physical_bytes == 0);
  sim.destroy_stream(s);
}

TEST_CASE("growable: refused resizes change nothing", "[vmm][growable]") {
  SimConfig config;
  config.total_memory = 64 * kMiB;
  SimDriver sim(config);
  GrowableBuffer buf(128 * kMiB, on(sim));
  REQUIRE(buf.resize(10 * kMiB, nullptr) == cudaSuccess);
  static_cast<char*>(buf.data())[5] = 9;
  const std::size_t physical = buf.physical_bytes();
  CHECK(buf.resize(128 * kMiB + 1, nullptr) == cudaErrorInvalidValue);  // beyond the maximum
  CHECK(buf.resize(100 * kMiB, nullptr) == cudaErrorMemoryAllocation);  // beyond the device
  sim.fail_map_at(1);
  CHECK(buf.resize(20 * kMiB, nullptr) == cudaErrorUnknown);  // the driver fails mid-way
  CHECK(buf.size() == 10 * kMiB);
  CHECK(buf.physical_bytes() == physical);
  CHECK(sim.counters().physical_bytes == physical);
  CHECK(static_cast<char*>(buf.data())[5] == 9);
  REQUIRE(buf.resize(20 * kMiB, nullptr) == cudaSuccess);  // and it still grows
  CHECK(static_cast<char*>(buf.data())[5] == 9);

  CHECK_THROWS_AS(GrowableBuffer(0, on(sim)), Error);
  GrowableOptions bad = on(sim);
  bad.device = 3;
  CHECK_THROWS_AS(GrowableBuffer(kMiB, bad), Error);
}

TEST_CASE("growable: the C API", "[vmm][growable][capi]") {
  capi_test::sim();
  sovaGrowable_t g = nullptr;
  void* p = nullptr;
  REQUIRE(sovaGrowableCreate(&g, &p, 64 * kMiB, 1) == cudaSuccess);
  REQUIRE(p != nullptr);
  REQUIRE(sovaGrowableResize(g, 3 * kMiB, nullptr) == cudaSuccess);
  std::memset(p, 4, 3 * kMiB);
  REQUIRE(sovaGrowableResize(g, 33 * kMiB, nullptr) == cudaSuccess);
  CHECK(static_cast<unsigned char*>(p)[3 * kMiB - 1] == 4);
  std::size_t size = 0, physical = 0;
  REQUIRE(sovaGrowableGetInfo(g, &size, &physical) == cudaSuccess);
  CHECK(size == 33 * kMiB);
  CHECK(physical == 34 * kMiB);
  CHECK(sovaGrowableResize(g, 65 * kMiB, nullptr) == cudaErrorInvalidValue);
  REQUIRE(sovaGrowableGetInfo(g, &size, nullptr) == cudaSuccess);
  CHECK(size == 33 * kMiB);
  CHECK(sovaGrowableResize(nullptr, kMiB, nullptr) == cudaErrorInvalidValue);
  int not_a_buffer = 0;
  CHECK(sovaGrowableGetInfo(reinterpret_cast<sovaGrowable_t>(&not_a_buffer), &size, nullptr) == cudaErrorInvalidValue);
  sovaGrowable_t none = nullptr;
  void* q = nullptr;
  CHECK(sovaGrowableCreate(&none, &q, 0, 0) == cudaErrorInvalidValue);
  CHECK(sovaGrowableCreate(&none, &q, kMiB, 7) == cudaErrorInvalidDevice);
  CHECK(none == nullptr);
  REQUIRE(sovaGrowableDestroy(g) == cudaSuccess);
  CHECK(sovaGrowableDestroy(g) == cudaErrorInvalidValue);  // already gone
}
