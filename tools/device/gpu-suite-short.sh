#!/bin/bash
# A short device call (2026-11-24, ~4 minutes of device time left to the
# session): the GPU suite (tools/run-tests --gpu, with .rmm carried for the RMM
# tests), threads_mixed (sova and cudaMallocAsync) and, if time is left, the
# Python package's GPU tests. Carry
# .carry/torch-whl, .carry/rmm-whl and .rmm (see README.md here).
set -o pipefail
t0=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
source tools/device/python_env.sh
use_carried_wheels .carry/torch-whl .carry/rmm-whl
echo "=== gpu suite"
timeout "${GPU_SUITE_S:-270}" tools/run-tests --gpu 2>&1 | grep -vE "^\[[0-9]+/|Compiling|Linking" | tail -30
cp build/meson-logs/testlog-gpu.txt "$OUT/" 2>/dev/null
echo "=== threads_mixed ($((SECONDS - t0)) s in)"
timeout 45 build/bench/sova_bench --benchmark_filter='^threads_mixed/(sova_pool|sova_capi|cudaMallocAsync_default)/classes:(16/real_time/threads:(1|2|4|8|16)|64/real_time/threads:(1|16))$' \
  --benchmark_min_time=0.1s 2>&1 | grep threads_mixed | awk '{printf "%s %s %s", $1, $2, $3; for (i = 4; i <= NF; i++) if ($i ~ /^(pairs|slow_per_pair)=/) printf " %s", $i; print ""}'
left=$(( ${TOTAL_S:-380} - (SECONDS - t0) ))
echo "=== python GPU tests ($((SECONDS - t0)) s in, ${left} s left)"
if [ "$left" -gt 60 ]; then
  pip_install_sova $((left / 2))
  left=$(( ${TOTAL_S:-380} - (SECONDS - t0) ))
  [ "$left" -gt 10 ] && (cd /tmp && timeout "$left" python3 -m pytest -q -p no:cacheprovider "$OLDPWD/python/tests_gpu" -rfE 2>&1 | tail -15)
fi
echo "=== done $((SECONDS - t0)) s"
