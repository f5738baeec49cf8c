// Catch2 side of the [scenario] tests' helpers: a pool's figures before and
// after a refused call ("nothing changes", README "Bad input"), reading the
// counters, streams made and destroyed by scope.
#pragma once

#include "gpu/scenario_util.hpp"
#include "support/catch.hpp"

#include <sova/sova.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <thread>

namespace sova::scenario {

inline sovaMemPoolStats stats(sovaMemPool_t pool) {
  sovaMemPoolStats s;
  std::memset(&s, 0, sizeof s);
  s.structSize = sizeof s;
  REQUIRE(sovaMemPoolGetStats(pool, &s) == cudaSuccess);
  return s;
}

inline std::uint64_t attr(sovaMemPool_t pool, cudaMemPoolAttr a) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaMemPoolGetAttribute(pool, a, &v) == cudaSuccess);
  return v;
}

inline std::uint64_t graph_attr(sovaMemPool_t pool, cudaGraphMemAttributeType a) {
  std::uint64_t v = ~std::uint64_t{0};
  REQUIRE(sovaMemPoolGetGraphMemAttribute(pool, a, &v) == cudaSuccess);
  return v;
}

/// What a refused call must leave as it was.
struct Figures {
  std::uint64_t reserved = 0, used = 0, live = 0, allocations = 0, deallocations = 0;
  std::uint64_t attr_reserved = 0, attr_used = 0;
  bool operator==(const Figures& o) const {
    return reserved == o.reserved && used == o.used && live == o.live && allocations == o.allocations &&
           deallocations == o.deallocations && attr_reserved == o.attr_reserved && attr_used == o.attr_used;
  }
};

inline Figures figures(sovaMemPool_t pool) {
  const sovaMemPoolStats s = stats(pool);
  Figures f;
  f.reserved = s.reservedCurrent;
  f.used = s.usedCurrent;
  f.live = s.liveBlocks;
  f.allocations = s.allocations;
  f.deallocations = s.deallocations;
  f.attr_reserved = attr(pool, cudaMemPoolAttrReservedMemCurrent);
  f.attr_used = attr(pool, cudaMemPoolAttrUsedMemCurrent);
  return f;
}

inline std::ostream& operator<<(std::ostream& os, const Figures& f) {
  return os << "{reserved " << f.reserved << ", used " << f.used << ", live " << f.live << ", allocations "
            << f.allocations << ", deallocations " << f.deallocations << ", attr reserved " << f.attr_reserved
            << ", attr used " << f.attr_used << "}";
}

/// A non-blocking stream of `device`; synchronized and destroyed at scope exit.
class Stream {
 public:
  explicit Stream(int device) : device_(device) {
    int saved = 0;
    REQUIRE(cudaGetDevice(&saved) == cudaSuccess);
    REQUIRE(cudaSetDevice(device) == cudaSuccess);
    REQUIRE(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaSetDevice(saved) == cudaSuccess);
  }
  ~Stream() {
    if (s_ != nullptr) {
      cudaStreamSynchronize(s_);
      cudaStreamDestroy(s_);
    }
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return s_; }
  int device() const { return device_; }
  void sync() const { REQUIRE(cudaStreamSynchronize(s_) == cudaSuccess); }

 private:
  int device_;
  cudaStream_t s_ = nullptr;
};

/// Polls `done` every millisecond for up to `seconds`: what docs/graphs.md
/// tells a program that needs a released graph's figure exact to do ("reads
/// the statistics again until it drops").
template <class F>
bool poll(F done, double seconds = 10.0) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/// Puts the calling thread's current device back at scope exit.
struct KeepDevice {
  int saved = 0;
  KeepDevice() { REQUIRE(cudaGetDevice(&saved) == cudaSuccess); }
  ~KeepDevice() { cudaSetDevice(saved); }
};

}  // namespace sova::scenario
