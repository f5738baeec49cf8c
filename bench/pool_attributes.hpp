// The cudaMemPoolAttr figures the benchmarks trim, reset and read, for a pool
// reached through C calls of the runtime's shape: the driver's own
// (cudaMemPoolGetAttribute, ... on a cudaMemPool_t: the default pool, RMM's
// cuda_async resource) or sova's C API, which mirrors them (sovaMemPool*).
// One piece of code for both, so that both are read alike.
#pragma once

#include "allocators.hpp"
#include "replay/memory_now.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace sova_bench {

template <class Handle>
struct PoolAttributeApi {
  const char* prefix;  ///< "cudaMemPool" or "sovaMemPool": names the call in errors
  cudaError_t (*get)(Handle, cudaMemPoolAttr, void*);
  cudaError_t (*set)(Handle, cudaMemPoolAttr, void*);
  cudaError_t (*trim_to)(Handle, std::size_t);

  std::uint64_t read(Handle pool, cudaMemPoolAttr attr, const char* attr_name) const {
    std::uint64_t value = 0;
    check(get(pool, attr, &value), "GetAttribute", attr_name);
    return value;
  }
  /// TrimTo(0), then ReservedMemCurrent.
  std::uint64_t trim(Handle pool) const {
    check(trim_to(pool, 0), "TrimTo", nullptr);
    return read(pool, cudaMemPoolAttrReservedMemCurrent, "ReservedMemCurrent");
  }
  /// TrimTo(0), then ReservedMemHigh and UsedMemHigh set to 0 (which resets
  /// them to the current values).
  void reset_peaks(Handle pool) const {
    check(trim_to(pool, 0), "TrimTo", nullptr);
    std::uint64_t zero = 0;
    check(set(pool, cudaMemPoolAttrReservedMemHigh, &zero), "SetAttribute", "ReservedMemHigh");
    check(set(pool, cudaMemPoolAttrUsedMemHigh, &zero), "SetAttribute", "UsedMemHigh");
  }
  PeakFigures read_peaks(Handle pool) const {
    return {read(pool, cudaMemPoolAttrReservedMemHigh, "ReservedMemHigh"),
            read(pool, cudaMemPoolAttrUsedMemHigh, "UsedMemHigh")};
  }
  MemoryNow memory_now(Handle pool) const {
    return {read(pool, cudaMemPoolAttrReservedMemCurrent, "ReservedMemCurrent"),
            read(pool, cudaMemPoolAttrUsedMemCurrent, "UsedMemCurrent")};
  }

 private:
  /// check_cuda with the call's name, e.g. "cudaMemPoolGetAttribute(UsedMemHigh)",
  /// spelled out only on failure.
  void check(cudaError_t err, const char* call, const char* attr_name) const {
    if (err == cudaSuccess) return;
    std::string what = std::string(prefix) + call;
    if (attr_name != nullptr) what += std::string("(") + attr_name + ")";
    check_cuda(err, what.c_str());
  }
};

inline const PoolAttributeApi<cudaMemPool_t> kDriverPoolApi{"cudaMemPool", cudaMemPoolGetAttribute,
                                                            cudaMemPoolSetAttribute, cudaMemPoolTrimTo};
inline const PoolAttributeApi<sovaMemPool_t> kSovaPoolApi{"sovaMemPool", sovaMemPoolGetAttribute,
                                                          sovaMemPoolSetAttribute, sovaMemPoolTrimTo};

}  // namespace sova_bench
