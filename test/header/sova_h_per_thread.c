/* The C API as seen by code built with `nvcc --default-stream per-thread`. */
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include <sova/sova.h>
