#!/bin/bash
# A/B of threads_mixed/ (bench/threads_mixed.hpp) between this tree and an
# older one unpacked in ab-base/ (git archive COMMIT | tar -x -C ab-base):
# release builds of sova_bench in both, then, AB_ROUNDS times (default 2) and
# alternating trees, the pool's and the C API's cases at 8 and 16 threads
# with AB_REPS repetitions (default 5) of 0.2 s in one process, as the suite
# runs them: each repetition makes new streams, whose handles CUDA hands out
# again (session 12: the previous run's caches stranded until the release
# worker's synchronize, and the miss storms they caused).
# Prints one line per repetition: tree, case, pairs/s and the pool's per-pair
# counters where the case has them (the base may lack some).
set -o pipefail
source bench/bench_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build_ab_trees sova_bench
show() {
  awk -v tree=$1 '/^threads_mixed/ && !/_(mean|median|stddev|cv) / {
    printf "%s %s", tree, $1
    for (i = 2; i <= NF; i++) if ($i ~ /^(pairs|slow_per_pair|heap_all_per_pair|reserved_MiB|stranded_MiB)=/) printf " %s", $i
    print ""
  }'
}
filter=${AB_FILTER:-'^threads_mixed/(sova_pool|sova_capi)/classes:(16|64)/real_time/threads:(8|16)$'}
for round in $(seq ${AB_ROUNDS:-2}); do
  for tree in . ab-base; do
    timeout 200 $tree/build-ab/bench/sova_bench --benchmark_filter="$filter" --benchmark_min_time=0.2s \
      --benchmark_repetitions=${AB_REPS:-5} 2>&1 | show $tree
  done
done
