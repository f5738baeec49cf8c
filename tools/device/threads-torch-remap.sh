#!/bin/bash
# threads_mixed/ alone (two runs of the suite's cases for sova's pool and C
# API), then PyTorch training with and without remapping
# (bench/torch/train_compare.py --scale 0.5, the package installed by pip).
# Carry .carry/torch-whl, .carry/rmm-whl and .rmm.
set -o pipefail
t0=$SECONDS
B=build-bench/bench
[ -x $B/sova_bench ] || { source bench/bench_lib.sh; configure_bench build-bench -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null; meson compile -C build-bench sova_bench 2>&1 | grep -E "error|FAILED"; }
for run in 1 2; do
  echo "=== threads_mixed run $run ($((SECONDS - t0)) s)"
  timeout 120 $B/sova_bench --benchmark_filter='^threads_mixed/(sova_pool|sova_capi)/classes:(16|64)/real_time/threads:(1|4|8|16)$' \
    --benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep median |
    awk '{printf "%s %s %s", $1, $2, $3; for (i = 4; i <= NF; i++) if ($i ~ /^(pairs|slow_per_pair)=/) printf " %s", $i; print ""}'
done
echo "=== torch ($((SECONDS - t0)) s)"
source tools/device/python_env.sh
use_carried_wheels .carry/torch-whl .carry/rmm-whl
pip_install_sova 120
left=$(( ${TOTAL_S:-560} - (SECONDS - t0) ))
timeout $left python3 bench/torch/train_compare.py --out $OUT/tc --scale 0.5 2>&1 | tail -30
echo "=== done $((SECONDS - t0)) s"
