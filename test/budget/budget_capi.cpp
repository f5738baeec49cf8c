// The C API's configurations of the driver-call budget: sovaMallocAsync /
// sovaFreeAsync on the device's current pool (a pool of the test's, made
// current for the measurement, the default one given back after), on the C
// API tests' process driver (two simulated devices).
#include "budget/budget_measure.hpp"
#include "capi/capi_test_util.hpp"
#include "support/scoped_current_device.hpp"

#include <cstdint>
#include <limits>

namespace sova::budget {

namespace {

using capi_test::ScopedPool;
using capi_test::sim;

/// `pool` current on `device` for the scope; the default pool current after.
class CurrentPool {
 public:
  CurrentPool(int device, sovaMemPool_t pool) : device_(device) {
    REQUIRE(sovaDeviceSetMemPool(device, pool) == cudaSuccess);
  }
  ~CurrentPool() { CHECK(sovaDeviceSetMemPool(device_, capi_test::default_pool(device_)) == cudaSuccess); }
  CurrentPool(const CurrentPool&) = delete;
  CurrentPool& operator=(const CurrentPool&) = delete;

 private:
  int device_;
};

void set_threshold(sovaMemPool_t pool, std::uint64_t threshold) {
  REQUIRE(sovaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold) == cudaSuccess);
}

/// kPairs of (sovaMallocAsync, a kernel, sovaFreeAsync) of `bytes` on `stream`
/// (`kernel_stream`: where the kernel goes, when `stream` is an implicit handle).
Measured capi_pairs(const char* name, std::size_t bytes, cudaStream_t stream, cudaStream_t kernel_stream) {
  Measured m{name, measure(sim(), [&] {
                void* p = nullptr;
                REQUIRE(sovaMallocAsync(&p, bytes, stream) == cudaSuccess);
                sim().launch(kernel_stream, [] {});
                REQUIRE(sovaFreeAsync(p, stream) == cudaSuccess);
              })};
  REQUIRE(sim().stream_synchronize(kernel_stream) == cudaSuccess);
  return m;
}

}  // namespace

std::vector<Measured> measure_capi() {
  constexpr std::size_t KiB = 1024;
  constexpr std::size_t MiB = KiB * KiB;
  struct Size {
    const char* label;
    std::size_t bytes;
  };
  const Size sizes[] = {{"4 KiB", 4 * KiB}, {"1 MiB", MiB}, {"4 MiB", 4 * MiB}, {"64 MiB", 64 * MiB}};
  std::vector<Measured> out;
  for (const bool keep : {false, true}) {
    for (const Size& size : sizes) {
      ScopedPool pool(0);
      set_threshold(pool, keep ? std::numeric_limits<std::uint64_t>::max() : 0);
      CurrentPool current(0, pool);
      capi_test::ScopedStream stream;
      const std::string name =
          std::string("capi ") + size.label + (keep ? ", threshold UINT64_MAX" : ", threshold 0");
      out.push_back(capi_pairs(name.c_str(), size.bytes, stream, stream));
    }
  }
  {
    ScopedPool pool(0);
    CurrentPool current(0, pool);
    out.push_back(capi_pairs("capi legacy stream (0), 4 KiB", 4 * KiB, nullptr, nullptr));
    out.push_back(capi_pairs("capi cudaStreamPerThread, 4 KiB", 4 * KiB, cudaStreamPerThread, cudaStreamPerThread));
  }
  {
    test::ScopedCurrentDevice on_one(sim(), 1);
    ScopedPool pool(1);
    CurrentPool current(1, pool);
    const cudaStream_t stream = sim().create_stream(false, 1);
    out.push_back(capi_pairs("capi device 1 current, its stream, 4 KiB", 4 * KiB, stream, stream));
    out.push_back(capi_pairs("capi device 1 current, legacy stream, 4 KiB", 4 * KiB, nullptr, nullptr));
    sim().destroy_stream(stream);
  }
  return out;
}

}  // namespace sova::budget
