// Enum values that come from C, read as the integers they are.
//
// A C caller may store any int in an enum field or pass any int for an enum
// argument; in C++ an enum object holding a value outside its enumerators'
// range is undefined behaviour to load (UBSan's -fsanitize=enum reports it),
// so switching on it or comparing it is too. sova reads such values with
// raw_enum and checks them before any code looks at them as enums.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>

namespace sova::detail {

/// The integer stored in an enum object, without loading it as the enum.
template <class Enum>
int raw_enum(const Enum& value) noexcept {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on the ABIs sova supports");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

/// cudaMemAccessFlags' values: none, read, read-write.
inline bool valid_access_flags(int raw) noexcept {
  return raw == cudaMemAccessFlagsProtNone || raw == cudaMemAccessFlagsProtRead ||
         raw == cudaMemAccessFlagsProtReadWrite;
}

/// cudaMemPoolAttr's values that pools know (every one the runtime has).
inline bool known_pool_attr(int raw) noexcept {
  switch (raw) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
    case cudaMemPoolAttrReleaseThreshold:
    case cudaMemPoolAttrReservedMemCurrent:
    case cudaMemPoolAttrReservedMemHigh:
    case cudaMemPoolAttrUsedMemCurrent:
    case cudaMemPoolAttrUsedMemHigh: return true;
    default: return false;
  }
}

}  // namespace sova::detail
