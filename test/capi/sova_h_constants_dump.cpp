// Prints the C API's constants that the Python package copies, as the
// compiler sees them, for check_python_constants.py: `NAME VALUE` a line.
// The policies, pool flags and sleep modes of sova.h (every enumerator: the
// script checks that against sova.h's text), and the cudaMemPoolAttr values
// python/sova/pool.py passes to sovaMemPool{Get,Set}Attribute.
#include <sova/sova.h>

#include <cstdio>

#define SOVA_CONSTANTS(X) \
  X(sovaPolicyDefault) \
  X(sovaPolicySizeClass) \
  X(sovaPolicyBuddy) \
  X(sovaPolicyBestFit) \
  X(sovaMemPoolNoStreamChecks) \
  X(sovaMemPoolNoRemap) \
  X(sovaMemPoolThoroughRemap) \
  X(sovaMemPoolCompressible) \
  X(sovaMemPoolHostMemory) \
  X(sovaMemPoolSleepPinAhead) \
  X(sovaSleepBackup) \
  X(sovaSleepDiscard) \
  X(sovaSleepDiscardZeroed) \
  X(cudaMemPoolAttrReleaseThreshold) \
  X(cudaMemPoolAttrReservedMemHigh) \
  X(cudaMemPoolAttrUsedMemHigh)

int main() {
#define SOVA_PRINT_CONSTANT(name) std::printf("%s %lld\n", #name, static_cast<long long>(name));
  SOVA_CONSTANTS(SOVA_PRINT_CONSTANT)
#undef SOVA_PRINT_CONSTANT
  return 0;
}
