// Helpers for the C API tests. All of them share one process-wide state (the
// C API's pools and the process driver), so every test creates its own pools
// and streams, destroys them, and leaves each device's current pool as the
// default; figures of the shared default pool are compared as differences.
#pragma once

#include "support/catch.hpp"

#include <sova/sim.hpp>
#include <sova/sova.h>

#include <cstdint>
#include <cstring>

namespace sova::capi_test {

/// The SimDriver every C API test runs on: two devices of 1 GiB. Installed as
/// the process driver before the first C API call of the binary, and leaked:
/// default pools live to the end of the process and must find it alive.
inline SimDriver& sim() {
  static SimDriver& driver = []() -> SimDriver& {
    SimConfig config;
    config.device_count = 2;
    config.total_memory = std::size_t{1} << 30;
    auto* d = new SimDriver(config);
    // Fails only if something locked another driver first: say so once,
    // here (the first call is on the test's main thread), rather than have
    // every test fail obscurely.
    (void)set_process_driver(d);
    REQUIRE(&process_driver() == d);
    return *d;
  }();
  return driver;
}

constexpr std::size_t MiB = std::size_t{1} << 20;

inline sovaMemPoolProps props_on(int device, std::size_t max_size = 0) {
  sovaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.device = device;
  props.policy = sovaPolicyDefault;
  props.maxSize = max_size;
  props.handleTypes = cudaMemHandleTypeNone;
  return props;
}

/// A pool made by sovaMemPoolCreate, destroyed at scope exit unless the test
/// destroyed it itself (release()).
class ScopedPool {
 public:
  explicit ScopedPool(int device = 0, std::size_t max_size = 0) : ScopedPool(props_on(device, max_size)) {}
  explicit ScopedPool(const sovaMemPoolProps& props) {
    sim();
    REQUIRE(sovaMemPoolCreate(&pool_, &props) == cudaSuccess);
    REQUIRE(pool_ != nullptr);
  }
  ~ScopedPool() {
    if (pool_ != nullptr) CHECK(sovaMemPoolDestroy(pool_) == cudaSuccess);
  }
  ScopedPool(const ScopedPool&) = delete;
  ScopedPool& operator=(const ScopedPool&) = delete;
  operator sovaMemPool_t() const { return pool_; }
  sovaMemPool_t get() const { return pool_; }
  /// The test destroys the pool itself.
  sovaMemPool_t release() {
    sovaMemPool_t p = pool_;
    pool_ = nullptr;
    return p;
  }

 private:
  sovaMemPool_t pool_ = nullptr;
};

/// A sim stream, synchronized and destroyed at scope exit.
class ScopedStream {
 public:
  ScopedStream() : stream_(sim().create_stream()) {}
  ~ScopedStream() {
    sim().stream_synchronize(stream_);
    sim().destroy_stream(stream_);
  }
  ScopedStream(const ScopedStream&) = delete;
  ScopedStream& operator=(const ScopedStream&) = delete;
  operator cudaStream_t() const { return stream_; }
  void synchronize() const { REQUIRE(sim().stream_synchronize(stream_) == cudaSuccess); }

 private:
  cudaStream_t stream_;
};

inline std::uint64_t attr(sovaMemPool_t pool, cudaMemPoolAttr which) {
  std::uint64_t value = 0;
  REQUIRE(sovaMemPoolGetAttribute(pool, which, &value) == cudaSuccess);
  return value;
}
inline std::uint64_t used(sovaMemPool_t pool) { return attr(pool, cudaMemPoolAttrUsedMemCurrent); }
inline std::uint64_t reserved(sovaMemPool_t pool) { return attr(pool, cudaMemPoolAttrReservedMemCurrent); }

inline sovaMemPool_t default_pool(int device) {
  sim();
  sovaMemPool_t pool = nullptr;
  REQUIRE(sovaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess);
  REQUIRE(pool != nullptr);
  return pool;
}

/// Writes `byte` over [ptr, ptr + bytes) in stream order, as a kernel would.
inline void fill_on(cudaStream_t stream, void* ptr, std::size_t bytes, unsigned char byte) {
  sim().launch(stream, [=] { std::memset(ptr, byte, bytes); });
}

/// True when every byte of [ptr, ptr + bytes) is `byte` (host read: synchronize first).
inline bool holds(const void* ptr, std::size_t bytes, unsigned char byte) {
  const auto* p = static_cast<const unsigned char*>(ptr);
  for (std::size_t i = 0; i < bytes; ++i)
    if (p[i] != byte) return false;
  return true;
}

}  // namespace sova::capi_test
