// The C API's C++ overloads as seen by code built with `nvcc --default-stream
// per-thread`: a typed call spelled sovaMallocAsync must reach the _ptsz
// overloads (and so sovaMallocAsync_ptsz), and the overload set must stay
// unambiguous. Compile-only (test/header).
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <sova/sova.h>

#include <type_traits>

cudaError_t sova_header_test_typed_per_thread(sovaMemPool_t pool, cudaStream_t stream) {
  float* f = nullptr;
  int* i = nullptr;
  void* v = nullptr;
  cudaError_t err = sovaMallocAsync(&f, 16, stream);
  if (err == cudaSuccess) err = sovaMallocAsync(&i, 16, pool, stream);
  if (err == cudaSuccess) err = sovaMallocFromPoolAsync(&i, 16, pool, stream);
  if (err == cudaSuccess) err = sovaMallocAsync(&v, 16, stream);
  if (err == cudaSuccess) err = sovaFreeAsync(f, stream);
  return err;
}
