/* See raw_enums.h. */
#include "raw_enums.h"

#include <string.h>

cudaError_t raw_set_attribute(sovaMemPool_t pool, int attr, void* value) {
  return sovaMemPoolSetAttribute(pool, (enum cudaMemPoolAttr)attr, value);
}

cudaError_t raw_get_attribute(sovaMemPool_t pool, int attr, void* value) {
  return sovaMemPoolGetAttribute(pool, (enum cudaMemPoolAttr)attr, value);
}

cudaError_t raw_set_access(sovaMemPool_t pool, int type, int device, int flags) {
  struct cudaMemAccessDesc desc;
  memset(&desc, 0, sizeof desc);
  desc.location.type = (enum cudaMemLocationType)type;
  desc.location.id = device;
  desc.flags = (enum cudaMemAccessFlags)flags;
  return sovaMemPoolSetAccess(pool, &desc, 1);
}

cudaError_t raw_get_access(int* flags, sovaMemPool_t pool, int type, int device) {
  struct cudaMemLocation location;
  enum cudaMemAccessFlags out = cudaMemAccessFlagsProtNone;
  cudaError_t error;
  memset(&location, 0, sizeof location);
  location.type = (enum cudaMemLocationType)type;
  location.id = device;
  error = sovaMemPoolGetAccess(&out, pool, &location);
  *flags = (int)out;
  return error;
}

cudaError_t raw_sleep(sovaMemPool_t pool, int mode, cudaStream_t stream) {
  return sovaMemPoolSleep(pool, (sovaSleepMode)mode, stream);
}
