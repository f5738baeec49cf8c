#!/bin/bash
# A/B of this tree against another one unpacked in ab-base/, in one device call:
#
#   git archive BASE_COMMIT | (mkdir -p ab-base && tar -x -C ab-base)
#   tools/device/ab-trees.sh            # then delete ab-base/
#
# ab-base/ is untracked, so the device call carries it. Release builds of
# sova_bench and sova_driver_time in build-ab/ of both trees (a base that
# predates sova_driver_time needs bench/replay/driver_time.cpp, timed_driver.hpp
# and bench/meson.build copied in), then AB_ROUNDS times (default 2), the trees
# alternating within each round, which tree goes first alternating between
# rounds (a tree always run first was always slower in the warm pair once):
#   - the warm pair (pair/ at 256 B and 4 KiB: sova's pool with and without the
#     stream checks, the C API);
#   - threads_mixed/ for the pool and the C API at 8 and 16 threads, AB_REPS
#     repetitions (default 5) in one process, as the suite runs them (each
#     repetition makes new streams, which CUDA hands out again);
#   - the replay of every trace in bench/traces/ (sova_driver_time, AB_PASSES
#     steady passes, default 30).
# AB_PIN prefixes every run (e.g. "taskset -c 3": unpinned, the lent hosts'
# times swing up to 2x). AB_FILTER replaces the sova_bench filter, AB_TRACES the
# list of traces, AB_ARGS adds sova_driver_time arguments.
# Prints one line per repetition or run: tree, case, and its figures (pairs/s or
# ns a pair with the pool's per-pair counters; replay time, ns per event and the
# slow path's line for a trace).
set -o pipefail
source bench/bench_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
build_ab_trees sova_bench sova_driver_time
show() {
  awk -v tree=$1 '/^(threads_mixed|pair|pair_beside_graph)\// && !/_(mean|median|stddev|cv) / {
    printf "%s %s %s %s", tree, $1, $2, $3
    for (i = 4; i <= NF; i++) if ($i ~ /^(pairs|slow_per_pair|heap_all_per_pair|reserved_MiB|stranded_MiB)=/) printf " %s", $i
    print ""
  }'
}
filter=${AB_FILTER:-'^(threads_mixed/(sova_pool|sova_capi)/classes:(16|64)/real_time/threads:(8|16)|pair/(sova_pool|sova_pool_unchecked|sova_capi)/(256|4096)/real_time)$'}
traces=${AB_TRACES:-$(ls bench/traces/*.csv.gz | xargs -n1 basename | sed 's/\.csv\.gz$//')}
for round in $(seq ${AB_ROUNDS:-2}); do
  order=". ab-base"
  ((round % 2 == 0)) && order="ab-base ."
  for tree in $order; do
    timeout 200 ${AB_PIN:-} $tree/build-ab/bench/sova_bench --benchmark_filter="$filter" --benchmark_min_time=0.2s \
      --benchmark_repetitions=${AB_REPS:-5} 2>&1 | show $tree
  done
  for t in $traces; do
    for tree in $order; do
      timeout 60 ${AB_PIN:-} $tree/build-ab/bench/sova_driver_time bench/traces/$t.csv.gz --passes=${AB_PASSES:-30} ${AB_ARGS:-} |
        awk -v tree=$tree -v t=$t '/^replay/ {r=$2; e=$6} /^slow path/ {print tree, t, r " us", e, $0}' |
        sed -E 's/fast-path hits.*//'
    done
  done
done
