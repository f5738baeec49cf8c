/* C API calls with enum arguments given as raw integers. A C caller may pass
 * any int where the C API takes an enum; in C++
 * an enum object holding a value outside its range is undefined behaviour,
 * so the tests make such calls from C (raw_enums.c), as a C user would. */
#ifndef SOVA_TEST_RAW_ENUMS_H
#define SOVA_TEST_RAW_ENUMS_H

#include <sova/sova.h>

#ifdef __cplusplus
extern "C" {
#endif

cudaError_t raw_set_attribute(sovaMemPool_t pool, int attr, void* value);
cudaError_t raw_get_attribute(sovaMemPool_t pool, int attr, void* value);
/* One descriptor: location (type, id) and flags, all raw. */
cudaError_t raw_set_access(sovaMemPool_t pool, int type, int device, int flags);
/* The flags as stored, read back as an int. */
cudaError_t raw_get_access(int* flags, sovaMemPool_t pool, int type, int device);
/* sovaMemPoolSleep with any int for the mode. */
cudaError_t raw_sleep(sovaMemPool_t pool, int mode, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
