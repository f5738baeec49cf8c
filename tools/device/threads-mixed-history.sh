#!/bin/bash
# threads_mixed on the GPU, each case alone in a fresh process and then all of
# them in one process (as the benchmark suite runs them, one pool shared by
# every case, each run on new streams): how much of a case's time is the
# history of the pool (destroyed streams' states). Per-pair counters from
# PoolStats (slow-path allocations and their host time). Release build in
# build-diag. Output: $OUT/history.txt.
set -o pipefail
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
meson setup build-diag -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null 2>&1 ||
  meson setup --reconfigure build-diag 2>&1 | tail -3
meson compile -C build-diag bench/sova_bench 2>&1 | tail -1
B=build-diag/bench/sova_bench
show() { grep threads_mixed | awk '{printf "%s %s %s", $1, $2, $3; for (i = 4; i <= NF; i++) if ($i ~ /^(pairs|slow_per_pair|slow_ns_per_pair|grown_per_pair|driver_work_per_pair)=/) printf " %s", $i; print ""}'; }
{
echo "=== alone ($((SECONDS - t0)) s in)"
for c in 'classes:16/real_time/threads:1' 'classes:16/real_time/threads:16' 'classes:64/real_time/threads:1' 'classes:64/real_time/threads:4' 'classes:64/real_time/threads:16'; do
  for a in sova_pool sova_pool_unchecked; do
    timeout 30 $B --benchmark_filter="^threads_mixed/$a/$c\$" --benchmark_min_time=0.2s 2>&1 | show
  done
done
echo "=== in one process, as the suite runs them ($((SECONDS - t0)) s in)"
timeout 90 $B --benchmark_filter='^threads_mixed/sova_pool/' --benchmark_min_time=0.2s 2>&1 | show
} | tee $OUT/history.txt
echo "=== done $((SECONDS - t0)) s"
