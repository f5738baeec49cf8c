// The VMM features (docs/vmm.md) on the real driver (suite 'gpu'): what the H100 reports, and the
// driver-level calls behind compression and POSIX handles. The pool-level
// features run in the conformance suite (test/conformance/test_ipc.cpp,
// test_vmm_features.cpp) on this same device.
#include "support/catch.hpp"

#include <sova/driver.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>

#include <unistd.h>

using namespace sova;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;
}  // namespace

TEST_CASE("vmm gpu: the H100 reports VMM, POSIX handles and compression", "[gpu][vmm]") {
  DeviceInfo info;
  REQUIRE(cuda_driver().device_info(0, &info) == cudaSuccess);
  INFO(info.name << ": fabric " << info.fabric_supported << ", multicast " << info.multicast_supported
                 << ", host NUMA VMM " << info.host_numa_vmm_supported << " (node " << info.host_numa_id << "), RDMA "
                 << info.rdma_with_vmm_supported);
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

// What the driver grants for compression with each combination of flags,
// printed (WARN; docs/vmm.md, "Compressible memory"); fails only if no combination is compressed
// while the device reports support.
TEST_CASE("vmm gpu probe: compression granted per combination of allocation flags", "[gpu][vmm][probe]") {
  CUmemAllocationProp base = {};
  base.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  base.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  base.location.id = 0;
  base.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_GENERIC;
  void* fn[4] = {};
  const char* names[4] = {"cuMemCreate", "cuMemGetAllocationPropertiesFromHandle", "cuMemRelease",
                          "cuMemGetAllocationGranularity"};
  for (int i = 0; i < 4; ++i) {
    cudaDriverEntryPointQueryResult found{};
    REQUIRE(cudaGetDriverEntryPointByVersion(names[i], &fn[i], 12000, cudaEnableDefault, &found) == cudaSuccess);
  }
  auto create = reinterpret_cast<PFN_cuMemCreate_v10020>(fn[0]);
  auto props_of = reinterpret_cast<PFN_cuMemGetAllocationPropertiesFromHandle_v10020>(fn[1]);
  auto release = reinterpret_cast<PFN_cuMemRelease_v10020>(fn[2]);
  auto granularity = reinterpret_cast<PFN_cuMemGetAllocationGranularity_v10020>(fn[3]);
  REQUIRE(cudaFree(nullptr) == cudaSuccess);  // a current context
  int granted = 0;
  for (int rdma = 0; rdma < 2; ++rdma) {
    for (int posix = 0; posix < 2; ++posix) {
      for (std::size_t mib : {2, 64}) {
        CUmemAllocationProp p = base;
        p.allocFlags.gpuDirectRDMACapable = static_cast<unsigned char>(rdma);
        p.requestedHandleTypes = posix ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
        std::size_t g = 0;
        const CUresult rg = granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
        CUmemGenericAllocationHandle h = 0;
        const std::size_t bytes = std::max<std::size_t>(mib * kMiB, g);
        const CUresult rc = create(&h, bytes, &p, 0);
        CUmemAllocationProp got = {};
        if (rc == CUDA_SUCCESS) {
          props_of(&got, h);
          release(h);
        }
        const bool compressed = rc == CUDA_SUCCESS && got.allocFlags.compressionType == CU_MEM_ALLOCATION_COMP_GENERIC;
        granted += compressed ? 1 : 0;
        WARN("compression probe: rdma " << rdma << " posix " << posix << " " << bytes / kMiB << " MiB: granularity "
                                        << g << " (" << rg << "), create " << rc << ", compressed " << compressed);
      }
    }
  }
  CHECK(granted > 0);
}
