/* An outside C program that calls the CUDA runtime itself besides sova
 * (check_packaging.sh links it with pkg-config's flags plus the runtime, as
 * sova.pc and the README say), and reads sova's last error message. Runs on
 * the host simulation (SOVA_DRIVER=sim). */
#include <sova/sova.h>

#include <stdio.h>
#include <string.h>

int main(void) {
  void* p = NULL;
  if (sovaMallocAsync(&p, 4096, 0) != cudaSuccess) return 1;
  if (sovaFreeAsync(p, 0) != cudaSuccess) return 2;
  const cudaError_t err = sovaFreeAsync(p, 0); /* a double free */
  if (err != cudaErrorInvalidValue) return 3;
  if (strstr(sovaGetLastErrorMessage(), "already freed") == NULL) return 4;
  printf("calls_runtime: %s: %s\n", cudaGetErrorString(err), sovaGetLastErrorMessage());
  return 0;
}
