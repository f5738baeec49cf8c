// Issue 15 on the real driver (suite 'gpu'): what the H100 reports, and the
// driver-level calls behind compression and POSIX handles. The pool-level
// features run in the conformance suite (test/conformance/test_ipc.cpp,
// test_vmm_features.cpp) on this same device.
#include "support/catch.hpp"

#include <sova/driver.hpp>

#include <unistd.h>

using namespace sova;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("vmm gpu: the H100 reports VMM, POSIX handles and compression", "[gpu][vmm]") {
  DeviceInfo info;
  REQUIRE(cuda_driver().device_info(0, &info) == cudaSuccess);
  INFO(info.name << ": fabric " << info.fabric_supported << ", multicast " << info.multicast_supported
                 << ", host NUMA VMM " << info.host_numa_vmm_supported << " (node " << info.host_numa_id
                 << "), RDMA " << info.rdma_with_vmm_supported);
  CHECK(info.vmm_supported);
  CHECK(info.posix_fd_supported);
  CHECK(info.compression_supported);  // the issue: the H100 reports support
  CHECK(info.granularity == 2 * kMiB);
}

TEST_CASE("vmm gpu: a compressible create is granted and the property query says so", "[gpu][vmm]") {
  Driver& d = cuda_driver();
  PhysicalProps props;
  props.location.id = 0;
  props.compressible = true;
  props.handle_types = cudaMemHandleTypePosixFileDescriptor;
  std::size_t g = 0;
  REQUIRE(d.granularity_for(props, &g) == cudaSuccess);
  REQUIRE(g >= 2 * kMiB);
  PhysicalHandle h = 0;
  REQUIRE(d.physical_create_with(props, g, &h) == cudaSuccess);
  std::uintptr_t va = 0;
  REQUIRE(d.address_reserve(g, g, &va) == cudaSuccess);
  REQUIRE(d.map(va, g, h) == cudaSuccess);
  PhysicalProps got;
  REQUIRE(d.properties_at(va, &got) == cudaSuccess);
  CHECK(got.compressible);
  CHECK(got.handle_types == cudaMemHandleTypePosixFileDescriptor);
  CHECK(got.location.type == cudaMemLocationTypeDevice);
  CHECK(got.location.id == 0);
  int fd = -1;
  REQUIRE(d.export_posix_fd(h, &fd) == cudaSuccess);
  CHECK(fd >= 0);
  ::close(fd);
  CHECK(d.properties_at(va + g, &got) != cudaSuccess);  // nothing mapped there
  REQUIRE(d.unmap(va, g) == cudaSuccess);
  REQUIRE(d.address_free(va, g) == cudaSuccess);
  REQUIRE(d.physical_release(h) == cudaSuccess);
  // A handle made without the POSIX type cannot be exported.
  PhysicalHandle plain = 0;
  REQUIRE(d.physical_create(0, 2 * kMiB, &plain) == cudaSuccess);
  CHECK(d.export_posix_fd(plain, &fd) != cudaSuccess);
  REQUIRE(d.physical_release(plain) == cudaSuccess);
  CHECK(d.import_posix_fd(-1, &plain) == cudaErrorInvalidValue);
}
