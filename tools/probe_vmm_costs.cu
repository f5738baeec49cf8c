// Probe: what remapping's driver calls cost, and which of them can be merged
// (a remapped chunk's unmap and access grant dominate lstm_train's and
// unet_train's replays on the H100; docs/benchmarks.md, "Driver costs").
//   1. cuMemUnmap of one range that spans several adjacent mappings (several
//      handles): allowed or refused, and its cost against one call each.
//   2. cuMemSetAccess: cost by size (one granule, one 32 MiB chunk, three),
//      one call over three adjacent mappings against three calls, a grant
//      over memory that is already accessible, and with 1.5 GiB of other
//      mappings in the same reservation.
//   3. cuMemUnmap of an accessible mapping against one never granted access,
//      and of a handle that stays mapped at a second address (a ghost).
//   4. Whether map, grant and unmap wait for work the device is running on
//      another stream (a 20 ms kernel that touches none of that memory): a
//      call that waits stalls the allocating thread behind the whole queue.
// Each figure is the median of 15 repetitions, in microseconds.
#include <cuda.h>
#include <cuda_runtime.h>

#include "probe_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

CUmemAllocationProp prop{};
CUmemAccessDesc access{};
std::size_t granule = 0;

// Runs setup, then times `timed`, then runs teardown; median over reps.
double median_us(const std::function<void()>& setup, const std::function<void()>& timed,
                 const std::function<void()>& teardown, int reps = 15) {
  std::vector<double> times;
  for (int rep = 0; rep < reps; ++rep) {
    setup();
    const double t0 = now_us();
    timed();
    times.push_back(now_us() - t0);
    teardown();
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Handles {
  std::vector<CUmemGenericAllocationHandle> h;
  std::size_t bytes;
  Handles(int n, std::size_t each) : h(n), bytes(each) {
    for (auto& handle : h) CHECK(cuMemCreate(&handle, each, &prop, 0));
  }
  ~Handles() {
    for (auto handle : h) cuMemRelease(handle);
  }
  void map_at(CUdeviceptr va) const {
    for (std::size_t i = 0; i < h.size(); ++i) CHECK(cuMemMap(va + i * bytes, bytes, 0, h[i], 0));
  }
  void unmap_each(CUdeviceptr va) const {
    for (std::size_t i = 0; i < h.size(); ++i) CHECK(cuMemUnmap(va + i * bytes, bytes));
  }
  void grant_each(CUdeviceptr va) const {
    for (std::size_t i = 0; i < h.size(); ++i) CHECK(cuMemSetAccess(va + i * bytes, bytes, &access, 1));
  }
  std::size_t total() const { return h.size() * bytes; }
};

}  // namespace

int main() {
  cudaFree(nullptr);  // context
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemGetAllocationGranularity(&granule, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const std::size_t chunk = 16 * granule;
  const std::size_t reserve = 64 * chunk;
  CUdeviceptr va = 0, ghost_va = 0;
  CHECK(cuMemAddressReserve(&va, reserve, 0, 0, 0));
  CHECK(cuMemAddressReserve(&ghost_va, 4 * chunk, 0, 0, 0));

  // 1. One unmap over three adjacent mappings.
  {
    Handles three(3, chunk);
    three.map_at(va);
    const CUresult spanning = cuMemUnmap(va, three.total());
    const char* name = nullptr;
    cuGetErrorName(spanning, &name);
    std::printf("1. one cuMemUnmap over 3 adjacent 32 MiB mappings: %s\n", name);
    if (spanning != CUDA_SUCCESS) three.unmap_each(va);
    const double each = median_us(
        [&] {
          three.map_at(va);
          three.grant_each(va);
        },
        [&] { three.unmap_each(va); }, [] {});
    std::printf("   3 accessible 32 MiB mappings, one unmap each: %.1f us\n", each);
    if (spanning == CUDA_SUCCESS) {
      const double one = median_us(
          [&] {
            three.map_at(va);
            three.grant_each(va);
          },
          [&] { CHECK(cuMemUnmap(va, three.total())); }, [] {});
      std::printf("   the same, one unmap over all three: %.1f us\n", one);
    }
  }

  // 2. Access grants.
  for (const int with_others : {0, 1}) {
    Handles others(with_others ? 48 : 0, chunk);
    const CUdeviceptr base = va + 8 * chunk;  // the others from va + 12 chunks on
    if (with_others) {
      others.map_at(va + 12 * chunk);
      CHECK(cuMemSetAccess(va + 12 * chunk, others.total(), &access, 1));
    }
    std::printf("2. access grants%s\n",
                with_others ? ", with 1.5 GiB of other accessible mappings in the reservation" : "");
    for (const std::size_t bytes : {granule, chunk}) {
      Handles one(1, bytes);
      const double t =
          median_us([&] { one.map_at(base); }, [&] { one.grant_each(base); }, [&] { one.unmap_each(base); });
      std::printf("   one fresh %zu MiB mapping: %.1f us\n", bytes >> 20, t);
    }
    Handles three(3, chunk);
    const double each =
        median_us([&] { three.map_at(base); }, [&] { three.grant_each(base); }, [&] { three.unmap_each(base); });
    const double merged =
        median_us([&] { three.map_at(base); }, [&] { CHECK(cuMemSetAccess(base, three.total(), &access, 1)); },
                  [&] { three.unmap_each(base); });
    const double again = median_us(
        [&] {
          three.map_at(base);
          three.grant_each(base);
        },
        [&] { CHECK(cuMemSetAccess(base, three.total(), &access, 1)); }, [&] { three.unmap_each(base); });
    std::printf(
        "   3 fresh 32 MiB mappings, a grant each: %.1f us; one grant over all: %.1f us; "
        "a second grant over all (already accessible): %.1f us\n",
        each, merged, again);
    if (with_others) {
      others.unmap_each(va + 12 * chunk);
    }
  }

  // 3. Unmap costs.
  {
    Handles one(1, chunk);
    const double granted = median_us(
        [&] {
          one.map_at(va);
          one.grant_each(va);
        },
        [&] { one.unmap_each(va); }, [] {});
    const double never = median_us([&] { one.map_at(va); }, [&] { one.unmap_each(va); }, [] {});
    const double ghosted = median_us(
        [&] {
          one.map_at(va);
          one.grant_each(va);
          one.map_at(ghost_va);
          one.grant_each(ghost_va);
        },
        [&] { one.unmap_each(va); }, [&] { one.unmap_each(ghost_va); });
    const double with_work = median_us(
        [&] {
          one.map_at(va);
          one.grant_each(va);
          cudaMemsetAsync(reinterpret_cast<void*>(va), 1, chunk, 0);
          cudaDeviceSynchronize();
        },
        [&] { one.unmap_each(va); }, [] {});
    std::printf(
        "3. unmap one 32 MiB mapping: accessible %.1f us; never granted %.1f us; "
        "also mapped elsewhere (a ghost) %.1f us; after device writes %.1f us\n",
        granted, never, ghosted, with_work);
  }
  // 4. The same calls while the device runs a 20 ms kernel on another stream.
  {
    int clock_khz = 0;
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
    const long long cycles = static_cast<long long>(clock_khz) * 20;  // 20 ms
    cudaStream_t busy;
    cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
    Handles one(1, chunk);
    auto busy_device = [&] {
      spin<<<1, 1, 0, busy>>>(cycles);
      cudaStreamQuery(busy);  // submitted
    };
    auto idle = [&] { cudaStreamSynchronize(busy); };
    const double map_busy = median_us(
        busy_device, [&] { one.map_at(va); },
        [&] {
          idle();
          one.unmap_each(va);
        },
        7);
    const double grant_busy = median_us(
        [&] {
          one.map_at(va);
          busy_device();
        },
        [&] { one.grant_each(va); },
        [&] {
          idle();
          one.unmap_each(va);
        },
        7);
    const double unmap_busy = median_us(
        [&] {
          one.map_at(va);
          one.grant_each(va);
          busy_device();
        },
        [&] { one.unmap_each(va); }, idle, 7);
    CUmemGenericAllocationHandle fresh = 0;
    const double create_busy = median_us(
        busy_device, [&] { CHECK(cuMemCreate(&fresh, chunk, &prop, 0)); },
        [&] {
          idle();
          CHECK(cuMemRelease(fresh));
        },
        7);
    const double create_idle =
        median_us([] {}, [&] { CHECK(cuMemCreate(&fresh, chunk, &prop, 0)); }, [&] { CHECK(cuMemRelease(fresh)); }, 7);
    std::printf(
        "4. with a 20 ms kernel running on another stream: map %.1f us, grant %.1f us, "
        "unmap (accessible) %.1f us, create 32 MiB %.1f us (idle: %.1f us)\n",
        map_busy, grant_busy, unmap_busy, create_busy, create_idle);
    cudaStreamDestroy(busy);
  }
  CHECK(cuMemAddressFree(va, reserve));
  CHECK(cuMemAddressFree(ghost_va, 4 * chunk));
  return 0;
}
