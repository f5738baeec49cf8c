/* An outside C program using sova through pkg-config (check_packaging.sh
 * builds it against an install, shared and static). Runs on sova's host
 * simulation (SOVA_DRIVER=sim), so no GPU is needed: exit 0 when a pool,
 * an allocation from it, its statistics and the frees all work. */
#include <sova/sova.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  sovaMemPoolProps props;
  memset(&props, 0, sizeof props);
  sovaMemPool_t pool = NULL;
  void* p = NULL;
  uint64_t used = 0;
  if (sovaMemPoolCreate(&pool, &props) != cudaSuccess) return 1;
  if (sovaMallocFromPoolAsync(&p, 4096, pool, 0) != cudaSuccess || p == NULL) return 2;
  if (sovaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used) != cudaSuccess || used != 4096) return 3;
  if (sovaFreeAsync(p, 0) != cudaSuccess) return 4;
  if (sovaMallocAsync(&p, 100, 0) != cudaSuccess || sovaFreeAsync(p, 0) != cudaSuccess) return 5;
  if (sovaMemPoolDestroy(pool) != cudaSuccess) return 6;
  puts("c_app: ok");
  return 0;
}
