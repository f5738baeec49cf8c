#!/bin/bash
# The fast path with 1, 2 and 4 GPUs visible, in one device call: what a node
# of several GPUs costs sova where every GPU is visible to every process
# (torchrun sets the device, not CUDA_VISIBLE_DEVICES). A release build of
# sova_bench and sova_driver_time in build-ab/, then VIS_ROUNDS rounds (default
# 3), the visibilities alternating within each round and their order rotating
# between rounds:
#   - the warm pair (pair/ at 256 B and 4 KiB: sova's pool and the C API);
#   - the replay of every trace in bench/traces/ (sova_driver_time, VIS_PASSES
#     steady passes, default 30).
#
#   tools/device/visible-devices.sh      # on a machine of 4 GPUs (nvidia-h200-x4)
#
# VIS_SETS lists the CUDA_VISIBLE_DEVICES values (default "0 0,1 0,1,2,3"; a
# set naming GPUs the machine lacks is skipped); VIS_PIN prefixes every run
# (default "taskset -c 2": unpinned, the lent hosts' times swing up to 2x).
# Prints one line per run: visible GPUs, case, figure.
set -o pipefail
source bench/bench_lib.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
configure_bench build-ab -Dbuildtype=release -Dgpu=enabled -Dtests=false -Dbenchmarks=true >/dev/null &&
  meson compile -C build-ab sova_bench sova_driver_time 2>&1 | grep -E "error|FAILED"
sets=()
for s in ${VIS_SETS:-0 0,1 0,1,2,3}; do
  last=${s##*,}
  ((last < count)) && sets+=("$s")
done
pin=${VIS_PIN:-taskset -c 2}
filter='^pair/(sova_pool|sova_capi)/(256|4096)/real_time$'
traces=$(ls bench/traces/*.csv.gz | xargs -n1 basename | sed 's/\.csv\.gz$//')
n=${#sets[@]}
for round in $(seq ${VIS_ROUNDS:-3}); do
  order=()
  for i in $(seq 0 $((n - 1))); do order+=("${sets[$(((i + round - 1) % n))]}"); done
  for vis in "${order[@]}"; do
    CUDA_VISIBLE_DEVICES=$vis timeout 120 $pin build-ab/bench/sova_bench --benchmark_filter="$filter" \
      --benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 |
      awk -v vis="$vis" '/_median / {print "visible=" vis, $1, $2, $3}'
  done
  for t in $traces; do
    for vis in "${order[@]}"; do
      CUDA_VISIBLE_DEVICES=$vis timeout 60 $pin build-ab/bench/sova_driver_time bench/traces/$t.csv.gz \
        --passes=${VIS_PASSES:-30} | awk -v vis="$vis" -v t=$t '/^replay/ {print "visible=" vis, t, $2 " us"}'
    done
  done
done
